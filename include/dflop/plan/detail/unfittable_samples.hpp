// SPDX-License-Identifier: Apache-2.0
//! \file
//! The samples of a workload that no configuration can hold in memory: alone
//! in a microbatch (one in flight), with every memory saver on, some stage of
//! every candidate configuration still exceeds usable memory. Such a sample
//! would run out of memory in whatever batch draws it, hours into training;
//! the planner names them before planning instead (see
//! `planner_options::exclude_unfittable`).
//!
//! Cost: per distinct module shape, a bisection over the samples ordered by
//! that module's token count (the memory model's monotonicity, documented on
//! `memory_model`), then one pass over the samples against the Pareto front
//! of what each configuration holds. Milliseconds for 10^4 samples and 10^4
//! candidates.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/detail/candidate_enumeration.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Token count of `s` in module `kind`: what its memory grows with there.
[[nodiscard]] inline std::int64_t module_tokens(module_kind kind, const sample& s) noexcept {
  return kind == module_kind::encoder ? s.encoder_tokens : s.llm_tokens;
}

//! Finds the samples no configuration of a `plan_scorer` holds (see the file comment).
template <class Scorer>
class unfittable_sample_finder {
public:
  //! \param scorer prices memory (its model, cluster, headroom and layer split)
  //! \param workload the samples to check (must outlive the finder)
  unfittable_sample_finder(Scorer& scorer, std::span<const sample> workload) : scorer_(scorer), workload_(workload) {
    for (module_kind kind : all_module_kinds) {
      auto& order = order_[index_of(kind)];
      order.resize(workload.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return module_tokens(kind, workload[a]) < module_tokens(kind, workload[b]);
      });
      auto& rank = rank_[index_of(kind)];
      rank.resize(workload.size());
      for (std::size_t position = 0; position < order.size(); ++position) rank[order[position]] = position;
    }
  }

  //! Positions in the workload of the samples that fit under none of
  //! `candidates` (each with its most memory-saving variant), in workload order.
  //! Empty when no candidate holds even its weights: then no sample is to
  //! blame, and the planner reports the closest configuration instead.
  [[nodiscard]] std::vector<std::size_t> find(std::span<const plan_candidate> candidates) {
    // What each configuration holds: the first `held` samples of each module's order.
    std::vector<std::pair<std::size_t, std::size_t>> held;
    for (const plan_candidate& candidate : candidates) {
      const parallel_config saver = scorer_.checks().memory_variants(candidate.config).back();
      const std::size_t encoder = held_samples(module_kind::encoder, saver.encoder);
      const std::size_t llm = held_samples(module_kind::llm, saver.llm);
      if (encoder != no_weights && llm != no_weights) held.emplace_back(encoder, llm);
    }
    if (held.empty()) return {};
    const auto front = pareto_front(std::move(held));
    std::vector<std::size_t> unfittable;
    const auto& encoder_rank = rank_[index_of(module_kind::encoder)];
    const auto& llm_rank = rank_[index_of(module_kind::llm)];
    for (std::size_t i = 0; i < workload_.size(); ++i) {
      const bool fits = std::any_of(front.begin(), front.end(), [&](const auto& limits) {
        return encoder_rank[i] < limits.first && llm_rank[i] < limits.second;
      });
      if (!fits) unfittable.push_back(i);
    }
    return unfittable;
  }

private:
  // Marks a module shape whose weights alone exceed memory.
  static constexpr std::size_t no_weights = static_cast<std::size_t>(-1);

  static constexpr std::size_t index_of(module_kind kind) noexcept { return kind == module_kind::encoder ? 0 : 1; }

  // How many samples, in the module's token order, fit alone on every stage of
  // `degrees` (layers split by the search's partitioner); `no_weights` when
  // not even an empty microbatch does. Cached per shape.
  [[nodiscard]] std::size_t held_samples(module_kind kind, const module_parallelism& degrees) {
    if (degrees.pp == 0) return workload_.size();  // no such module: it holds anything
    const auto key = std::make_tuple(kind, degrees.tp, degrees.pp, degrees.dp, degrees.recompute,
                                     degrees.distributed_optimizer);
    if (auto found = held_.find(key); found != held_.end()) return found->second;
    const module_plan plan = scorer_.layouts().module_plan_of(kind, degrees, scorer_.partitioner());
    const auto fits = [&](std::span<const sample> microbatch) {
      for (int stage = 0; stage < degrees.pp; ++stage) {
        const auto bytes = estimate_memory_with(scorer_.memory(), kind, degrees.tp, plan.slice(stage), 1, microbatch,
                                                memory_choices_of(degrees));
        if (static_cast<double>(bytes.total()) > scorer_.checks().capacity()) return false;
      }
      return true;
    };
    std::size_t count = no_weights;
    if (fits({})) {
      // Bisect for the first sample, in token order, that does not fit.
      const auto& order = order_[index_of(kind)];
      std::size_t low = 0, high = order.size();
      while (low < high) {
        const std::size_t middle = low + (high - low) / 2;
        if (fits(workload_.subspan(order[middle], 1)))
          low = middle + 1;
        else
          high = middle;
      }
      count = low;
    }
    return held_.emplace(key, count).first->second;
  }

  // The pairs no other pair holds more of in both modules.
  [[nodiscard]] static std::vector<std::pair<std::size_t, std::size_t>> pareto_front(
      std::vector<std::pair<std::size_t, std::size_t>> held) {
    std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second > b.second;
    });
    std::vector<std::pair<std::size_t, std::size_t>> front;
    for (const auto& limits : held)
      if (front.empty() || limits.second > front.back().second) front.push_back(limits);
    return front;
  }

  Scorer& scorer_;
  std::span<const sample> workload_;
  std::array<std::vector<std::size_t>, 2> order_;  // per module: sample positions by token count
  std::array<std::vector<std::size_t>, 2> rank_;   // per module: each sample's place in that order
  std::map<std::tuple<module_kind, int, int, int, bool, bool>, std::size_t> held_;
};

}  // namespace dflop::detail
