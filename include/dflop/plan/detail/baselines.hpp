// SPDX-License-Identifier: Apache-2.0
//! \file
//! The two baselines the plan is compared with, chosen as each method would
//! choose and scored in the planner's simulator with its cost model, so the
//! comparison is like for like. `data_blind` reasons with the mean sample, an
//! even layer split and sequential packing; `dflop_reference` likewise, but packs
//! with the refined packer and its memory rule ignores how many microbatches
//! 1F1B keeps in flight.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/detail/candidate_enumeration.hpp>
#include <dflop/plan/detail/plan_scorer.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/pack/sequential_packer.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Data-blind choices (both baselines), best first by the method's own model:
//! even layer split, (m + S - 1) x slowest stage with mean-sample microbatches,
//! each candidate with its first memory variant the method's memory model
//! accepts (savers only when it says the plan does not fit without them). The
//! DFLOP reference's memory model ignores how many microbatches 1F1B keeps in
//! flight.
//!
//! Lazy: a consumer reads a few choices of a million candidates, so `next()`
//! orders the candidates by the estimate without savers (a lower bound: memory
//! variants only add recomputation) and checks memory only for the candidates it
//! reaches. The order is that of sorting every candidate's estimate stably
//! (ties in candidate order), as if all had been checked.
template <class Scorer>
class mean_ranking {
public:
  //! Ranks `candidates` (which must outlive the ranking) for `method`.
  mean_ranking(Scorer& scorer, std::span<const plan_candidate> candidates, plan_method method)
      : scorer_(&scorer), candidates_(candidates), reference_(method == plan_method::dflop_reference),
        mean_(scorer.mean_sample()) {
    queue_.reserve(candidates.size());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      parallel_config fastest = candidates[i].config;
      fastest.encoder.recompute = false;
      fastest.llm.recompute = false;
      queue_.push_back({estimate(fastest), static_cast<std::uint32_t>(i), unresolved});
    }
    std::make_heap(queue_.begin(), queue_.end(), later);
  }

  //! The next choice, or nullopt when no candidate is left.
  [[nodiscard]] std::optional<method_result> next() {
    while (!queue_.empty()) {
      std::pop_heap(queue_.begin(), queue_.end(), later);
      const entry top = queue_.back();
      queue_.pop_back();
      if (top.variant != unresolved) return result_of(top);
      const auto variants = scorer_->checks().memory_variants(candidates_[top.candidate].config);
      const auto variant = first_fitting_variant(variants, candidates_[top.candidate].config);
      if (variant == variants.size()) continue;
      const entry resolved{estimate(variants[variant]), top.candidate, static_cast<std::uint8_t>(variant)};
      // Still the least (its key did not grow): no other entry can come first.
      if (resolved.estimate == top.estimate) return result_of(resolved);
      queue_.push_back(resolved);
      std::push_heap(queue_.begin(), queue_.end(), later);
    }
    return std::nullopt;
  }

private:
  static constexpr std::uint8_t unresolved = 0xff;
  struct entry {
    double estimate;          // exact when resolved, else a lower bound
    std::uint32_t candidate;  // index into the candidates (breaks ties, as a stable sort would)
    std::uint8_t variant;     // index of its chosen memory variant, or `unresolved`
  };
  // Heap order: the least (estimate, candidate) on top.
  static bool later(const entry& a, const entry& b) noexcept {
    return a.estimate != b.estimate ? a.estimate > b.estimate : a.candidate > b.candidate;
  }

  [[nodiscard]] std::size_t per_bin(const parallel_config& config) const {
    return static_cast<std::size_t>(
        std::max(1L, std::lround(static_cast<double>(scorer_->options().global_batch) / config.bins())));
  }
  [[nodiscard]] std::size_t per_encoder_part(const parallel_config& config) const {
    return static_cast<std::size_t>(std::max(
        1L, std::lround(static_cast<double>(scorer_->options().global_batch) / (config.encoder.dp * config.microbatches))));
  }

  // Microbatches of k mean samples, per k: a million candidates share a few hundred sizes.
  const std::vector<sample>& mean_microbatch(std::size_t count) {
    auto found = of_size_.find(count);
    if (found == of_size_.end()) found = of_size_.emplace(count, std::vector<sample>(count, mean_)).first;
    return found->second;
  }
  // Memory checks price k mean samples as one sample holding their tokens (memory
  // is linear in tokens: flash attention keeps no score matrix), so a check costs
  // the same for any k.
  std::span<const sample> merged_microbatch(std::size_t count) {
    auto found = merged_of_size_.find(count);
    if (found == merged_of_size_.end()) {
      const auto k = static_cast<std::int64_t>(count);
      sample merged{"mean x " + std::to_string(count), mean_.kind, k * mean_.encoder_items, k * mean_.encoder_tokens,
                    k * mean_.llm_tokens};
      found = merged_of_size_.emplace(count, std::move(merged)).first;
    }
    return {&found->second, 1};
  }

  // The slowest stage of a module with even layers, `count` mean samples per
  // microbatch: a function of a few integers, cached.
  double slowest_stage(module_kind kind, const module_parallelism& degrees, std::size_t count) {
    const auto key = std::make_tuple(kind, degrees.tp, degrees.pp, count, degrees.recompute);
    auto found = slowest_.find(key);
    if (found != slowest_.end()) return found->second;
    const module_cost cost = scorer_->cost().estimate_time(kind, degrees.tp, mean_microbatch(count));
    const module_plan plan = scorer_->layouts().module_plan_of(kind, degrees, even_layers{});
    double slowest = 0;
    for (int s = 0; s < degrees.pp; ++s) slowest = std::max(slowest, cost.stage_recomputing(plan.slice(s), recomputed_layers(degrees, plan.slice(s).layers)).total());
    return slowest_.emplace(key, slowest).first->second;
  }

  // (m + S - 1) x the slowest stage of either module.
  double estimate(const parallel_config& config) {
    const double slowest = std::max(slowest_stage(module_kind::encoder, config.encoder, per_encoder_part(config)),
                                    slowest_stage(module_kind::llm, config.llm, per_bin(config)));
    return (config.microbatches + config.stages() - 1) * slowest;
  }

  // Index of the first of `variants` (of `base`) that the method's memory rule
  // accepts; `variants.size()` when none is.
  std::size_t first_fitting_variant(const std::vector<parallel_config>& variants, const parallel_config& base) {
    const microbatch_views mean_microbatches{merged_microbatch(per_bin(base)), merged_microbatch(per_encoder_part(base))};
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const double shortfall = reference_ ? scorer_->checks().reference_memory_shortfall(variants[v], mean_microbatches)
                                          : scorer_->checks().memory_shortfall(variants[v], even_layers{}, mean_microbatches);
      if (shortfall <= 0) return v;
    }
    return variants.size();
  }

  method_result result_of(const entry& e) {
    const parallel_config config = scorer_->checks().memory_variants(candidates_[e.candidate].config)[e.variant];
    return method_result{reference_ ? plan_method::dflop_reference : plan_method::data_blind,
                         config,
                         scorer_->layouts().module_plan_of(module_kind::encoder, config.encoder, even_layers{}),
                         scorer_->layouts().module_plan_of(module_kind::llm, config.llm, even_layers{}),
                         e.estimate,
                         0,
                         true,
                         0,
                         0};
  }

  Scorer* scorer_;
  std::span<const plan_candidate> candidates_;
  bool reference_;
  sample mean_;
  std::vector<entry> queue_;                            // a heap by `later`
  std::map<std::size_t, std::vector<sample>> of_size_;  // mean microbatches by size
  std::map<std::size_t, sample> merged_of_size_;        // merged mean microbatches by size
  std::map<std::tuple<module_kind, int, int, std::size_t, bool>, double> slowest_;
};

//! `choice` (a baseline's configuration) scored as its method runs it: even
//! layers, round-robin slots in arrival order, the method's packer.
template <class Scorer>
[[nodiscard]] method_result score_baseline(Scorer& scorer, method_result choice) {
  const plan_layout layout = scorer.layouts().layout_of(choice.config, even_layers{});
  const batch_options options = as_baselines_run(scorer.options().batch);
  tail_samples tails;
  if (choice.method == plan_method::data_blind)
    choice.iteration_seconds = scorer.scoring().simulate_all(layout, sequential_packer{}, options, &tails, tail_rule::p99);
  else
    choice.iteration_seconds = scorer.scoring().simulate_all(layout, refined_packer{}, options, &tails, tail_rule::p99);
  choice.peak_memory_gib = peak_gib(scorer.checks().stage_memories(choice.config, even_layers{}, tails));
  choice.fits_memory = scorer.checks().memory_shortfall(choice.config, even_layers{}, tails) <= 0;
  return choice;
}

//! The method's first choice that really fits (a user whose run runs out of
//! memory moves on to the next choice); when none of the first
//! `baseline_attempts` does, the first that fits once the user also turns on
//! the next memory savers (the packing, and so the tails, stay the same).
//! nullopt when neither rule finds one.
template <class Scorer>
[[nodiscard]] std::optional<method_result> choose_baseline(Scorer& scorer, std::span<const plan_candidate> candidates,
                                                           plan_method method) {
  std::size_t out_of_memory = 0;
  std::optional<method_result> with_savers;
  std::size_t attempts_before_savers = 0;
  mean_ranking<Scorer> ranking(scorer, candidates, method);
  while (out_of_memory < scorer.options().baseline_attempts) {
    auto next = ranking.next();
    if (!next) break;
    method_result& choice = *next;
    // Out of memory is known from the packing alone: no need to simulate it.
    const plan_layout layout = scorer.layouts().layout_of(choice.config, even_layers{});
    const batch_options options = as_baselines_run(scorer.options().batch);
    const tail_samples tails = method == plan_method::dflop_reference
                                   ? scorer.scoring().assigned_tails(layout, refined_packer{}, options)
                                   : scorer.scoring().assigned_tails(layout, sequential_packer{}, options);
    if (scorer.checks().memory_shortfall(choice.config, even_layers{}, tails) > 0) {
      if (!with_savers)
        if (const auto saver = scorer.checks().next_fitting_variant(choice.config, tails)) {
          with_savers = choice;
          with_savers->config = *saver;
          with_savers->encoder.degrees = saver->encoder;
          with_savers->llm.degrees = saver->llm;
          attempts_before_savers = out_of_memory + 1;
        }
      ++out_of_memory;
      continue;
    }
    choice = score_baseline(scorer, std::move(choice));
    if (choice.fits_memory) {
      choice.out_of_memory_attempts = out_of_memory;
      return choice;
    }
    ++out_of_memory;
  }
  if (!with_savers) return std::nullopt;
  method_result choice = score_baseline(scorer, std::move(*with_savers));
  if (!choice.fits_memory) return std::nullopt;
  choice.out_of_memory_attempts = attempts_before_savers;
  return choice;
}

}  // namespace dflop::detail
