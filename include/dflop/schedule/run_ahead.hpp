// SPDX-License-Identifier: Apache-2.0
//! \file
//! Lets the first pipeline positions run forwards further ahead of their
//! backwards than a schedule's own warm-up allows. In a multimodal pipeline the
//! encoder's positions come first and their forwards feed every LLM replica;
//! under 1F1B or ZB-H1 an encoder position may run only its next forward once a
//! backward has come back from the LLM, so an LLM replica waiting for its next
//! part waits for that round trip. Running ahead removes that wait at the cost
//! of more encoder activations in flight, memory a batch may otherwise spend
//! on recomputing fewer layers: the planner weighs the two by scoring
//! (`planner_options::encoder_run_ahead`).
#pragma once

#include <dflop/error.hpp>
#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dflop {

//! `schedule` with each of its first `positions` ranks running `extra` more
//! forwards before each of its other ops than it did (at most all of them):
//! a backward or weight op that followed `c` forwards now follows
//! `min(m, c + extra)`. The forwards keep their order, and so do the other ops;
//! the rest of the ranks are unchanged. With `extra` 0 the schedule is returned
//! as it was. Each moved position holds up to `extra` more microbatches'
//! activations (`peak_activations` counts them). The result stays
//! deadlock-free when the schedule was and `positions` is a prefix of the
//! pipeline: every forward it moves depends only on forwards of earlier
//! positions, which moved at least as far. Throws `schedule_error` for a
//! schedule with more than one chunk or `positions` over its ranks.
[[nodiscard]] inline pipeline_schedule with_run_ahead(pipeline_schedule schedule, std::uint32_t positions,
                                                      std::uint32_t extra) {
  if (schedule.chunks != 1)
    throw schedule_error("with_run_ahead: schedule '" + schedule.name + "' has " + std::to_string(schedule.chunks) +
                         " chunks; run-ahead applies to one-chunk schedules");
  if (positions > schedule.ranks)
    throw schedule_error("with_run_ahead: " + std::to_string(positions) + " positions asked of schedule '" +
                         schedule.name + "', which has " + std::to_string(schedule.ranks) + " ranks");
  if (extra == 0) return schedule;
  std::vector<pipeline_op> forwards;
  std::vector<pipeline_op> moved;
  for (std::uint32_t rank = 0; rank < positions; ++rank) {
    auto& ops = schedule.rank_ops[rank];
    forwards.clear();
    for (const auto& op : ops)
      if (op.kind == op_kind::forward) forwards.push_back(op);
    moved.clear();
    moved.reserve(ops.size());
    std::size_t seen = 0;     // forwards met so far in the old list
    std::size_t emitted = 0;  // forwards placed so far in the new one
    for (const auto& op : ops) {
      if (op.kind == op_kind::forward) {
        ++seen;
        continue;
      }
      const std::size_t wanted = std::min(forwards.size(), seen + extra);
      while (emitted < wanted) moved.push_back(forwards[emitted++]);
      moved.push_back(op);
    }
    while (emitted < forwards.size()) moved.push_back(forwards[emitted++]);
    ops.swap(moved);
  }
  return schedule;
}

}  // namespace dflop
