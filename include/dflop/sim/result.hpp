// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a simulation predicts: when every operation starts and ends, the
//! iteration's makespan, how busy each rank was and how much memory it held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dflop {

//! Start and end time of one operation.
struct op_timing {
  double start = 0;  //!< when it starts
  double end = 0;    //!< when it ends

  friend bool operator==(const op_timing&, const op_timing&) = default;
};

//! A simulated iteration. Ranks are the timeline's tracks (one per pipeline
//! stage x replica); rank r's operations, in its execution order, have their times
//! in `timings[rank_begin[r] .. rank_begin[r+1])`.
struct simulation_result {
  double makespan = 0;                           //!< end of the iteration (last op or gradient sync)
  double bubble_fraction = 0;                    //!< 1 - total busy time / (ranks x makespan)
  std::vector<double> busy;                      //!< per rank: summed op times (compute only)
  std::vector<std::uint32_t> peak_activations;  //!< per rank: (microbatch, chunk) activations held at once
  std::vector<op_timing> timings;                //!< per op, rank-major in execution order
  std::vector<std::uint32_t> rank_begin;         //!< size ranks + 1
  std::vector<op_timing> gradient_sync;          //!< per rank: its data-parallel all-reduce (empty if none)
  //! Per rank: the distributed optimizer's parameter all-gather at the step's
  //! start, before its first op (empty, or [0, 0), where the optimizer is not sharded).
  std::vector<op_timing> parameter_gather;

  //! Number of ranks (tracks).
  [[nodiscard]] std::size_t ranks() const noexcept { return busy.size(); }
  //! The timings of rank `rank`'s operations, in its execution order.
  [[nodiscard]] std::span<const op_timing> rank_timings(std::size_t rank) const noexcept {
    return {timings.data() + rank_begin[rank], timings.data() + rank_begin[rank + 1]};
  }
};

}  // namespace dflop
