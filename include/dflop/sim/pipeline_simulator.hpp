// SPDX-License-Identifier: Apache-2.0
//! \file
//! Exact simulation of one pipeline replica running a schedule: every operation
//! starts when its rank's previous op and its dependencies (plus transfer time)
//! have ended. Linear in the number of operations; reuses its buffers.
#pragma once

#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/schedule/validate.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/detail/op_graph.hpp>
#include <dflop/sim/result.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace dflop {

namespace detail {

[[noreturn]] inline void throw_deadlock(const op_graph& graph, const std::string& what,
                                        const auto& describe_op) {
  std::string text(what);
  text.append(": deadlock:");
  const auto heads = graph.stuck_heads();
  int listed = 0;
  for (std::size_t r = 0; r < heads.size() && listed < 8; ++r) {
    if (heads[r] >= graph.ops()) continue;
    text.append(listed++ == 0 ? " " : "; ").append("rank ").append(std::to_string(r)).append(" stuck at ");
    text.append(describe_op(r, heads[r] - graph.rank_begin[r]));
  }
  throw schedule_error(text);
}

inline void summarize(const op_graph& graph, simulation_result& result) {
  const std::size_t ranks = graph.ranks();
  result.rank_begin.assign(graph.rank_begin.begin(), graph.rank_begin.end());
  result.timings.resize(graph.ops());
  result.busy.assign(ranks, 0.0);
  double makespan = 0;
  for (std::size_t r = 0; r < ranks; ++r)
    for (std::uint32_t i = graph.rank_begin[r]; i < graph.rank_begin[r + 1]; ++i) {
      result.timings[i] = {graph.start[i], graph.end[i]};
      result.busy[r] += graph.duration[i];
      makespan = std::max(makespan, graph.end[i]);
    }
  result.makespan = makespan;
}

inline void finish_bubble(simulation_result& result) {
  const double busy = std::accumulate(result.busy.begin(), result.busy.end(), 0.0);
  const double capacity = result.makespan * static_cast<double>(result.ranks());
  result.bubble_fraction = capacity > 0 ? 1.0 - busy / capacity : 0.0;
}

}  // namespace detail

//! Simulates one pipeline replica. Keep one per thread and call `simulate` many
//! times: after the first call of a given size it allocates nothing.
class pipeline_simulator {
public:
  //! Simulates `schedule` with `costs` (whose `stages` must equal the schedule's
  //! model stages). `order`, when given, maps schedule position j to the microbatch
  //! whose costs it uses (order[j]); empty means identity. Transfers count only
  //! between different ranks. Throws `schedule_error` for an incomplete or
  //! deadlocking schedule and `dflop::error` for mismatched costs.
  void simulate(const pipeline_schedule& schedule, const pipeline_costs& costs, simulation_result& result,
                std::span<const std::uint32_t> order = {}) {
    check_shapes(schedule, costs, order);
    const std::uint32_t m = schedule.microbatches;
    const std::uint32_t stages = schedule.stages();
    constexpr auto none = std::numeric_limits<std::uint32_t>::max();

    // Op id of every (kind, microbatch, stage).
    sizes_.clear();
    for (const auto& ops : schedule.rank_ops) sizes_.push_back(ops.size());
    graph_.reset(sizes_);
    op_id_.assign(3 * static_cast<std::size_t>(m) * stages, none);
    for (std::uint32_t r = 0; r < schedule.ranks; ++r)
      for (std::size_t i = 0; i < schedule.rank_ops[r].size(); ++i) {
        const auto& op = schedule.rank_ops[r][i];
        const bool misplaced = op.microbatch >= m || op.stage >= stages || schedule.rank_of(op.stage) != r;
        if (misplaced || op_id_[detail::op_slot(schedule, op)] != none) validate(schedule);  // throws, naming the op
        op_id_[detail::op_slot(schedule, op)] = graph_.rank_begin[r] + static_cast<std::uint32_t>(i);
      }

    if (graph_.ops() != schedule.op_count()) validate(schedule);  // names the missing op
    const bool with_weight = !costs.weight.empty();
    const bool with_transfer = !costs.transfer.empty();
    std::uint32_t id = 0;
    for (std::uint32_t r = 0; r < schedule.ranks; ++r)
      for (const auto& op : schedule.rank_ops[r]) {
        const std::uint32_t j = order.empty() ? op.microbatch : order[op.microbatch];
        const std::size_t at = costs.at(j, op.stage);
        switch (op.kind) {
          case op_kind::forward: graph_.duration[id] = costs.forward[at]; break;
          case op_kind::backward:
            graph_.duration[id] = costs.backward[at] + (with_weight && !schedule.split_backward ? costs.weight[at] : 0.0);
            break;
          case op_kind::weight: graph_.duration[id] = with_weight ? costs.weight[at] : 0.0; break;
        }
        for (const auto& need : dependencies(schedule, op)) {
          const std::uint32_t from = op_id_[detail::op_slot(schedule, need)];
          if (from == none) validate(schedule);  // names the missing op
          double delay = 0;
          if (with_transfer && crosses_ranks(schedule, need, op))
            delay = costs.transfer[costs.at(j, std::min(need.stage, op.stage))];
          graph_.add_predecessor(from, delay);
        }
        graph_.finish_op();
        ++id;
      }

    if (graph_.run() != graph_.ops()) {
      detail::throw_deadlock(graph_, "schedule '" + schedule.name + "'", [&](std::size_t r, std::size_t i) {
        return to_string(schedule.rank_ops[r][i]) + " stage " + std::to_string(schedule.rank_ops[r][i].stage);
      });
    }
    detail::summarize(graph_, result);
    result.gradient_sync.clear();
    peak_activations(schedule, result.peak_activations);
    detail::finish_bubble(result);
  }

  //! Convenience: simulates into a fresh result.
  [[nodiscard]] simulation_result simulate(const pipeline_schedule& schedule, const pipeline_costs& costs,
                                           std::span<const std::uint32_t> order = {}) {
    simulation_result result;
    simulate(schedule, costs, result, order);
    return result;
  }

private:
  static void check_shapes(const pipeline_schedule& schedule, const pipeline_costs& costs,
                           std::span<const std::uint32_t> order) {
    if (schedule.ranks == 0 || schedule.rank_ops.size() != schedule.ranks) validate(schedule);
    if (costs.microbatches != schedule.microbatches || costs.stages != schedule.stages())
      throw error("simulate: costs are for " + std::to_string(costs.microbatches) + " microbatches x " +
                  std::to_string(costs.stages) + " stages, the schedule has " +
                  std::to_string(schedule.microbatches) + " x " + std::to_string(schedule.stages()));
    const std::size_t n = static_cast<std::size_t>(costs.microbatches) * costs.stages;
    if (costs.forward.size() != n || costs.backward.size() != n || (!costs.weight.empty() && costs.weight.size() != n) ||
        (!costs.transfer.empty() && costs.transfer.size() != n))
      costs.check();
    if (!order.empty() && order.size() != schedule.microbatches)
      throw error("simulate: the microbatch order has " + std::to_string(order.size()) + " entries, expected " +
                  std::to_string(schedule.microbatches));
    for (auto j : order)
      if (j >= schedule.microbatches) throw error("simulate: microbatch order entry out of range");
  }

  detail::op_graph graph_;
  std::vector<std::size_t> sizes_;
  std::vector<std::uint32_t> op_id_;
};

//! Simulates `schedule` with `costs` once (see `pipeline_simulator::simulate`).
[[nodiscard]] inline simulation_result simulate(const pipeline_schedule& schedule, const pipeline_costs& costs,
                                                std::span<const std::uint32_t> order = {}) {
  return pipeline_simulator{}.simulate(schedule, costs, order);
}

}  // namespace dflop
