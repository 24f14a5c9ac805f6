// SPDX-License-Identifier: Apache-2.0
//! \file
//! What an executor's step is tuned with and what it reports: shared by the
//! single-module `executor` and the `multimodal_executor`.
#pragma once

#include <dflop/exec/failure.hpp>
#include <dflop/schedule/op.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflop {

//! Tuning of an executor.
struct executor_options {
  double watchdog_seconds = default_watchdog_seconds;  //!< a wait with no progress this long stops every rank
  std::uint32_t receive_lookahead = 4;                 //!< receives are posted for this many ops ahead
  bool record_op_times = false;                        //!< fill `step_result::op_times` (off: no clock reads per op)
};

//! When one op ran on a rank, in seconds from the start of its step: from the
//! stage call (its inputs had arrived) to its return. What an online cost model
//! fits; host time, so a CUDA stage's entry measures its launches only.
struct op_time {
  op_kind kind = op_kind::forward;  //!< F, B or W
  std::uint32_t microbatch = 0;     //!< position in the schedule
  std::uint32_t stage = 0;          //!< model stage (in a multimodal run: pipeline position, encoder stages first)
  double start = 0;                 //!< the stage call began
  double end = 0;                   //!< the stage call returned

  friend bool operator==(const op_time&, const op_time&) = default;
};

//! What one step did on one rank.
struct step_result {
  double loss = 0;                    //!< loss summed over every microbatch of every replica (same on all ranks)
  double seconds = 0;                 //!< wall time of the step on this rank, gradient sync included
  std::size_t messages_sent = 0;      //!< point-to-point messages this rank sent (activations and gradients)
  std::size_t messages_received = 0;  //!< point-to-point messages it received
  std::size_t new_buffers = 0;        //!< blocks the buffer pool had to allocate during the step
  //! Gradient buffers of this rank whose data-parallel sum started inside the
  //! stage's last gradient-producing op (`gradients_ready`), overlapping it,
  //! rather than after the last op; 0 on a communicator that cannot start sums.
  std::size_t gradient_sums_overlapped = 0;
  std::vector<op_time> op_times;      //!< this rank's ops in the order they ran (with `record_op_times`)
};

}  // namespace dflop
