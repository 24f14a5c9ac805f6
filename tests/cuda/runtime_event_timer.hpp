// SPDX-License-Identifier: Apache-2.0
//! Host-callable wrappers around the CUDA event timer and the profiler on the GPU (compiled by nvcc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflop::test {

//! GPU seconds of one kernel that spins `cycles` SM clock cycles, timed by `event_timer`. Needs a GPU.
double time_spin_kernel(std::int64_t cycles, bool flush_l2);

//! What profiling a spinning kernel (a + b n + c n^2 cycles forward, twice that backward) gave.
struct gpu_profile_check {
  std::vector<double> sizes;             //!< the grid
  std::vector<double> forward_medians;   //!< measured medians, seconds
  std::vector<double> backward_medians;  //!< measured medians, seconds
  std::vector<double> forward_fitted;    //!< the fitted model at the grid points, seconds
  std::vector<double> activation_bytes;  //!< what the device-memory probe saw the forward leave
  std::size_t bytes_per_token = 0;       //!< what the forward allocated per token (kept until backward)
};

//! Profiles the spinning kernel with `profiler<event_timer>` and fits it. Needs a GPU.
gpu_profile_check profile_spin_kernel();

}  // namespace dflop::test
