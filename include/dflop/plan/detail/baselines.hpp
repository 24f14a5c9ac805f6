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

//! The data-blind method a baseline stands for.
enum class baseline_method {
  data_blind,       //!< mean-sample planning, sequential packing
  dflop_reference,  //!< the DFLOP reference: refined packing, one microbatch in flight in its memory rule
};

//! Data-blind choices (both baselines), best first by the method's own model:
//! even layer split, (m + S - 1) x slowest stage with mean-sample microbatches,
//! keeping what its memory model accepts. The DFLOP reference's memory model
//! ignores how many microbatches 1F1B keeps in flight.
template <class Scorer>
[[nodiscard]] std::vector<method_result> rank_by_mean(Scorer& scorer, std::span<const plan_candidate> candidates,
                                                      baseline_method method) {
  const bool reference = method == baseline_method::dflop_reference;
  const int global_batch = scorer.options().global_batch;
  const sample mean = scorer.mean_sample();
  std::vector<method_result> ranked;
  // Microbatches of k mean samples and their costs, per k (and TP): a million
  // candidates share a few hundred sizes. Memory checks price the k samples as
  // one sample holding their tokens (memory is linear in tokens: flash
  // attention keeps no score matrix), so a check costs the same for any k.
  std::map<std::size_t, std::vector<sample>> of_size;
  const auto mean_microbatch = [&](std::size_t count) -> const std::vector<sample>& {
    auto found = of_size.find(count);
    if (found == of_size.end()) found = of_size.emplace(count, std::vector<sample>(count, mean)).first;
    return found->second;
  };
  std::map<std::size_t, sample> merged_of_size;
  const auto merged_microbatch = [&](std::size_t count) -> std::span<const sample> {
    auto found = merged_of_size.find(count);
    if (found == merged_of_size.end()) {
      const auto k = static_cast<std::int64_t>(count);
      sample merged{"mean x " + std::to_string(count), mean.kind, k * mean.encoder_items, k * mean.encoder_tokens,
                    k * mean.llm_tokens};
      found = merged_of_size.emplace(count, std::move(merged)).first;
    }
    return {&found->second, 1};
  };
  std::map<std::tuple<module_kind, int, std::size_t>, module_cost> costs;
  const auto cost_of = [&](module_kind kind, int tp, const std::vector<sample>& microbatch) -> const module_cost& {
    const auto key = std::make_tuple(kind, tp, microbatch.size());
    auto found = costs.find(key);
    if (found == costs.end()) found = costs.emplace(key, scorer.cost().estimate_time(kind, tp, microbatch)).first;
    return found->second;
  };
  for (const plan_candidate& c : candidates) {
    const auto per_bin =
        static_cast<std::size_t>(std::max(1L, std::lround(static_cast<double>(global_batch) / c.config.bins())));
    const auto per_encoder_part = static_cast<std::size_t>(std::max(
        1L, std::lround(static_cast<double>(global_batch) / (c.config.encoder.dp * c.config.microbatches))));
    const std::vector<sample>& llm_microbatch = mean_microbatch(per_bin);
    const std::vector<sample>& encoder_microbatch = mean_microbatch(per_encoder_part);
    const microbatch_views mean_microbatches{merged_microbatch(per_bin), merged_microbatch(per_encoder_part)};
    // Like a user of such a framework, the method turns on memory savers only
    // when its memory rule says the configuration does not fit without them.
    for (const parallel_config& config : scorer.memory_variants(c.config)) {
      const double shortfall = reference ? scorer.reference_memory_shortfall(config, mean_microbatches)
                                         : scorer.memory_shortfall(config, even_layers{}, mean_microbatches);
      if (shortfall > 0) continue;
      const module_cost& encoder = cost_of(module_kind::encoder, config.encoder.tp, encoder_microbatch);
      const module_cost& llm = cost_of(module_kind::llm, config.llm.tp, llm_microbatch);
      const module_plan encoder_plan = scorer.module_plan_of(module_kind::encoder, config.encoder, even_layers{});
      const module_plan llm_plan = scorer.module_plan_of(module_kind::llm, config.llm, even_layers{});
      double slowest = 0;
      for (int s = 0; s < config.encoder.pp; ++s)
        slowest = std::max(slowest, encoder.stage(encoder_plan.slice(s), config.encoder.recompute).total());
      for (int s = 0; s < config.llm.pp; ++s)
        slowest = std::max(slowest, llm.stage(llm_plan.slice(s), config.llm.recompute).total());
      const double estimate = (config.microbatches + config.stages() - 1) * slowest;
      ranked.push_back(method_result{reference ? "dflop_reference" : "data_blind", config, encoder_plan, llm_plan,
                                     estimate, 0, true, 0, 0});
      break;
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const method_result& a, const method_result& b) {
    return a.estimated_seconds < b.estimated_seconds;
  });
  return ranked;
}

//! `choice` (a baseline's configuration) scored as its method runs it: even
//! layers, round-robin slots in arrival order, the method's packer.
template <class Scorer>
[[nodiscard]] method_result score_baseline(Scorer& scorer, method_result choice) {
  const plan_layout layout = scorer.layout_of(choice.config, even_layers{});
  batch_options options = scorer.options().batch;
  options.assignment = slot_assignment::round_robin;
  options.order = order_policy::identity;
  tail_samples tails;
  if (choice.method == "data_blind")
    choice.iteration_seconds = scorer.simulate_all(layout, sequential_packer{}, options, &tails);
  else
    choice.iteration_seconds = scorer.simulate_all(layout, refined_packer{}, options, &tails);
  choice.peak_memory_gib = peak_gib(scorer.stage_memories(choice.config, even_layers{}, tails));
  choice.fits_memory = scorer.memory_shortfall(choice.config, even_layers{}, tails) <= 0;
  return choice;
}

//! The method's first choice that really fits (a user whose run runs out of
//! memory moves on to the next choice); when none of the first
//! `baseline_attempts` does, the first that fits once the user also turns on
//! the next memory savers (the packing, and so the tails, stay the same).
//! nullopt when neither rule finds one.
template <class Scorer>
[[nodiscard]] std::optional<method_result> choose_baseline(Scorer& scorer, std::span<const plan_candidate> candidates,
                                                           baseline_method method) {
  std::size_t out_of_memory = 0;
  std::optional<method_result> with_savers;
  std::size_t attempts_before_savers = 0;
  for (method_result& choice : rank_by_mean(scorer, candidates, method)) {
    if (out_of_memory >= scorer.options().baseline_attempts) break;
    // Out of memory is known from the packing alone: no need to simulate it.
    const plan_layout layout = scorer.layout_of(choice.config, even_layers{});
    batch_options options = scorer.options().batch;
    options.assignment = slot_assignment::round_robin;
    const tail_samples tails = method == baseline_method::dflop_reference
                                   ? scorer.assigned_tails(layout, refined_packer{}, options)
                                   : scorer.assigned_tails(layout, sequential_packer{}, options);
    if (scorer.memory_shortfall(choice.config, even_layers{}, tails) > 0) {
      if (!with_savers)
        if (const auto saver = scorer.next_fitting_variant(choice.config, tails)) {
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
