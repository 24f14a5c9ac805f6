// SPDX-License-Identifier: Apache-2.0
//! \file
//! A simulated iteration as a flat list of timed events on named tracks (one per
//! rank = stage x replica): the common input of the text timeline and the Chrome
//! trace export.
#pragma once

#include <dflop/schedule/op.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/result.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! What a timeline event shows.
enum class timeline_kind : std::uint8_t {
  forward,        //!< F
  backward,       //!< B
  weight,         //!< W
  gradient_sync,  //!< data-parallel gradient all-reduce (or reduce-scatter, and the parameter all-gather)
};

//! One timed event on one track.
struct timeline_event {
  std::uint32_t track = 0;                      //!< index into `timeline::tracks`
  timeline_kind kind = timeline_kind::forward;  //!< what runs
  std::uint32_t microbatch = 0;                 //!< microbatch id (after ordering: the original id)
  std::uint32_t stage = 0;                      //!< model stage (pipeline position)
  std::uint32_t chunk = 0;                      //!< model chunk on its rank
  double start = 0;                             //!< start time
  double end = 0;                               //!< end time

  friend bool operator==(const timeline_event&, const timeline_event&) = default;
};

//! Named tracks and their events (each track's events in time order).
struct timeline {
  std::vector<std::string> tracks;    //!< track names, e.g. "stage 2", "llm s1 r3"
  std::vector<timeline_event> events;  //!< all events
  double makespan = 0;                //!< iteration length

  friend bool operator==(const timeline&, const timeline&) = default;
};

namespace detail {
constexpr timeline_kind timeline_kind_of(op_kind kind) noexcept {
  return kind == op_kind::forward ? timeline_kind::forward
         : kind == op_kind::backward ? timeline_kind::backward
                                     : timeline_kind::weight;
}
}  // namespace detail

//! The timeline of a single-pipeline simulation (`order` as given to `simulate`).
[[nodiscard]] inline timeline make_timeline(const pipeline_schedule& schedule, const simulation_result& result,
                                            std::span<const std::uint32_t> order = {}) {
  timeline out;
  out.makespan = result.makespan;
  out.events.reserve(result.timings.size());
  for (std::uint32_t r = 0; r < schedule.ranks; ++r) {
    out.tracks.push_back("stage " + std::to_string(r));
    const auto times = result.rank_timings(r);
    for (std::size_t i = 0; i < times.size(); ++i) {
      const auto& op = schedule.rank_ops[r][i];
      out.events.push_back({r, detail::timeline_kind_of(op.kind), order.empty() ? op.microbatch : order[op.microbatch],
                            op.stage, op.chunk, times[i].start, times[i].end});
    }
  }
  return out;
}

//! The timeline of a multimodal simulation, with each rank's gradient all-reduce.
[[nodiscard]] inline timeline make_timeline(const pipeline_schedule& schedule, const multimodal_costs& costs,
                                            const simulation_result& result, std::span<const std::uint32_t> order = {}) {
  timeline out;
  out.makespan = result.makespan;
  out.events.reserve(result.timings.size() + result.gradient_sync.size() + result.parameter_gather.size());
  for (std::uint32_t r = 0; r < result.ranks(); ++r) {
    out.tracks.push_back(costs.rank_name(r));
    const std::uint32_t position = multimodal_simulator::position_of(costs, r);
    const auto times = result.rank_timings(r);
    for (std::size_t i = 0; i < times.size(); ++i) {
      const auto& op = schedule.rank_ops[position][i];
      out.events.push_back({r, detail::timeline_kind_of(op.kind), order.empty() ? op.microbatch : order[op.microbatch],
                            op.stage, 0, times[i].start, times[i].end});
    }
    if (r < result.parameter_gather.size() && result.parameter_gather[r].end > result.parameter_gather[r].start)
      out.events.push_back({r, timeline_kind::gradient_sync, 0, position, 0, result.parameter_gather[r].start,
                            result.parameter_gather[r].end});
    if (r < result.gradient_sync.size() && result.gradient_sync[r].end > result.gradient_sync[r].start)
      out.events.push_back({r, timeline_kind::gradient_sync, 0, position, 0, result.gradient_sync[r].start,
                            result.gradient_sync[r].end});
  }
  return out;
}

}  // namespace dflop
