// SPDX-License-Identifier: Apache-2.0
//! \file
//! Microbatch ordering: in which order a pipeline runs its microbatches (or a
//! multimodal iteration its slots) changes warm-up, drain and stalls when costs
//! differ. Three policies: identity; Johnson's rule for two module groups (optimal
//! for a two-machine flow shop); and a simulator-guided NEH-style insertion search
//! under a budget of simulations, never worse than the better of the first two.
#pragma once

#include <dflop/schedule/op.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/result.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace dflop {

//! The shipped ordering policies.
enum class order_policy : std::uint8_t {
  identity,  //!< microbatches in their given order
  johnson,   //!< Johnson's rule on (first-group time, second-group time)
  neh,       //!< simulator-guided insertion search from the better of the two above
};

//! "identity", "johnson", "neh".
[[nodiscard]] constexpr std::string_view to_string(order_policy policy) noexcept {
  return policy == order_policy::identity ? "identity" : policy == order_policy::johnson ? "johnson" : "neh";
}

//! The policy called `name`, or nullopt.
[[nodiscard]] constexpr std::optional<order_policy> parse_order_policy(std::string_view name) noexcept {
  for (auto policy : {order_policy::identity, order_policy::johnson, order_policy::neh})
    if (to_string(policy) == name) return policy;
  return std::nullopt;
}

//! 0, 1, ..., count-1.
[[nodiscard]] inline std::vector<std::uint32_t> identity_order(std::uint32_t count) {
  std::vector<std::uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0U);
  return order;
}

//! Johnson's rule: jobs with first < second go first, by increasing first time; the
//! rest follow by decreasing second time. Minimizes the makespan of a two-machine
//! flow shop; for a pipeline, the machines are the two groups of stages.
[[nodiscard]] inline std::vector<std::uint32_t> johnson_order(std::span<const double> first,
                                                              std::span<const double> second) {
  std::vector<std::uint32_t> front;
  std::vector<std::uint32_t> back;
  for (std::uint32_t j = 0; j < first.size(); ++j) (first[j] < second[j] ? front : back).push_back(j);
  std::stable_sort(front.begin(), front.end(), [&](auto a, auto b) { return first[a] < first[b]; });
  std::stable_sort(back.begin(), back.end(), [&](auto a, auto b) { return second[a] > second[b]; });
  front.insert(front.end(), back.begin(), back.end());
  return front;
}

//! What an order search found.
struct order_search_result {
  std::vector<std::uint32_t> order;  //!< best order found
  double makespan = 0;               //!< its makespan
  std::size_t evaluations = 0;       //!< simulations spent
};

//! NEH-style insertion improvement: repeatedly takes one microbatch (heaviest
//! first, by `weight`), tries it at every other position and keeps the best
//! strictly shorter order, until a full pass improves nothing or `budget`
//! evaluations are spent. `makespan_of(order, cutoff)` simulates one candidate;
//! it may stop early and return any value >= `cutoff` once it knows the makespan
//! is at least `cutoff` (a candidate is kept only when shorter than the best).
template <class Makespan>
[[nodiscard]] order_search_result improve_order(std::vector<std::uint32_t> order, std::span<const double> weight,
                                                Makespan&& makespan_of, std::size_t budget) {
  constexpr double unbounded = std::numeric_limits<double>::infinity();
  order_search_result best{order, makespan_of(std::as_const(order), unbounded), 1};
  const std::size_t m = order.size();
  if (m < 2) return best;
  std::vector<std::uint32_t> jobs = identity_order(static_cast<std::uint32_t>(m));
  std::stable_sort(jobs.begin(), jobs.end(), [&](auto a, auto b) { return weight[a] > weight[b]; });
  std::vector<std::uint32_t> without;
  std::vector<std::uint32_t> candidate;
  bool improved = true;
  while (improved && best.evaluations < budget) {
    improved = false;
    for (const std::uint32_t job : jobs) {
      if (best.evaluations >= budget) break;
      const auto at = static_cast<std::size_t>(std::find(best.order.begin(), best.order.end(), job) - best.order.begin());
      without = best.order;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(at));
      std::size_t best_position = at;
      double best_makespan = best.makespan;
      for (std::size_t position = 0; position < m && best.evaluations < budget; ++position) {
        if (position == at) continue;
        candidate = without;
        candidate.insert(candidate.begin() + static_cast<std::ptrdiff_t>(position), job);
        // The cutoff is the best itself, not the acceptance threshold below: a
        // simulation stops on a bound that sums durations in another order than
        // the run (~1e-13 relative apart), which the 1e-12 margin absorbs.
        const double makespan = makespan_of(std::as_const(candidate), best_makespan);
        ++best.evaluations;
        if (makespan < best_makespan * (1 - 1e-12)) {
          best_makespan = makespan;
          best_position = position;
        }
      }
      if (best_position != at) {
        best.order = without;
        best.order.insert(best.order.begin() + static_cast<std::ptrdiff_t>(best_position), job);
        best.makespan = best_makespan;
        improved = true;
      }
    }
  }
  return best;
}

//! Per-microbatch time of a pipeline's two stage groups, [0, split) and
//! [split, stages) (split 0 means half), forward + backward + weight.
inline void group_times(const pipeline_costs& costs, std::uint32_t split, std::vector<double>& first,
                        std::vector<double>& second) {
  if (split == 0) split = std::max(1U, costs.stages / 2);
  first.assign(costs.microbatches, 0.0);
  second.assign(costs.microbatches, 0.0);
  for (std::uint32_t j = 0; j < costs.microbatches; ++j)
    for (std::uint32_t s = 0; s < costs.stages; ++s) {
      const std::size_t at = costs.at(j, s);
      const double time = costs.forward[at] + costs.backward[at] + (costs.weight.empty() ? 0.0 : costs.weight[at]);
      (s < split ? first : second)[j] += time;
    }
}

//! Per-slot time of the encoder (slowest replica, all stages) and of the LLM
//! (slowest replica), forward + backward + weight: Johnson's two machines.
inline void group_times(const multimodal_costs& costs, std::vector<double>& encoder, std::vector<double>& llm) {
  const auto module_time = [&](const module_costs& module, std::vector<double>& out) {
    out.assign(costs.microbatches, 0.0);
    for (std::uint32_t q = 0; q < module.replicas; ++q)
      for (std::uint32_t k = 0; k < costs.microbatches; ++k) {
        double time = 0;
        for (std::uint32_t s = 0; s < module.stages; ++s) {
          const std::size_t at = module.at(q, k, s, costs.microbatches);
          time += module.forward[at] + module.backward[at] + (module.weight.empty() ? 0.0 : module.weight[at]);
        }
        out[k] = std::max(out[k], time);
      }
  };
  module_time(costs.encoder, encoder);
  module_time(costs.llm, llm);
}

namespace detail {
template <class Makespan>
order_search_result order_with(order_policy policy, const std::vector<double>& first, const std::vector<double>& second,
                               Makespan&& makespan_of, std::size_t budget) {
  const auto m = static_cast<std::uint32_t>(first.size());
  if (policy == order_policy::identity) {
    auto order = identity_order(m);
    const double makespan = makespan_of(std::as_const(order), std::numeric_limits<double>::infinity());
    return {std::move(order), makespan, 1};
  }
  auto johnson = johnson_order(first, second);
  const double johnson_makespan = makespan_of(std::as_const(johnson), std::numeric_limits<double>::infinity());
  if (policy == order_policy::johnson) return {std::move(johnson), johnson_makespan, 1};
  auto identity = identity_order(m);
  const double identity_makespan = makespan_of(std::as_const(identity), std::numeric_limits<double>::infinity());
  std::vector<double> weight(m);
  for (std::uint32_t j = 0; j < m; ++j) weight[j] = first[j] + second[j];
  auto start = johnson_makespan <= identity_makespan ? std::move(johnson) : std::move(identity);
  auto result = improve_order(std::move(start), weight, makespan_of, budget > 2 ? budget - 2 : 1);
  result.evaluations += 2;
  return result;
}
}  // namespace detail

//! Orders a pipeline's microbatches by `policy` (Johnson splits the stages at
//! `split`, 0 = half; `neh` spends at most `budget` simulations). The result's
//! order maps schedule position -> microbatch, ready for `simulate(..., order)`.
[[nodiscard]] inline order_search_result order_microbatches(order_policy policy, const pipeline_schedule& schedule,
                                                            const pipeline_costs& costs, pipeline_simulator& simulator,
                                                            std::size_t budget = 1000, std::uint32_t split = 0) {
  std::vector<double> first;
  std::vector<double> second;
  group_times(costs, split, first, second);
  simulation_result scratch;
  return detail::order_with(
      policy, first, second,
      [&](const std::vector<std::uint32_t>& order, double /*cutoff: simulated whole*/) {
        simulator.simulate(schedule, costs, scratch, order);
        return scratch.makespan;
      },
      budget);
}

//! Orders a multimodal iteration's slots by `policy` (Johnson: encoder vs LLM).
[[nodiscard]] inline order_search_result order_slots(order_policy policy, const pipeline_schedule& schedule,
                                                     const multimodal_costs& costs, multimodal_simulator& simulator,
                                                     std::size_t budget = 1000) {
  std::vector<double> encoder;
  std::vector<double> llm;
  group_times(costs, encoder, llm);
  simulator.bind(schedule, costs);  // once: every candidate shares the schedule and costs
  return detail::order_with(
      policy, encoder, llm,
      [&](const std::vector<std::uint32_t>& order, double cutoff) {
        return simulator.bound_makespan_below(order, cutoff);
      },
      budget);
}

}  // namespace dflop
