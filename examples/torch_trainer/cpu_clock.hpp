// SPDX-License-Identifier: Apache-2.0
//! \file
//! Thread CPU time, for profiling and op timing on a shared machine: the CPU an
//! op used on its thread does not grow when other jobs take the cores (wall
//! time does). libtorch runs each op on the calling thread here (one intra-op
//! thread; the CPU autograd engine runs backward on the caller), so it is the op's cost.
#pragma once

#include <dflop/runtime/timer.hpp>

#include <concepts>
#include <cstddef>
#include <ctime>
#include <functional>
#include <utility>
#include <vector>

namespace dflop::torch_trainer {

//! CPU seconds the calling thread has used.
[[nodiscard]] inline double thread_cpu_seconds() noexcept {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

//! A profiler timer policy (runtime/timer.hpp) measuring the calling thread's CPU
//! time. With `flush_bytes`, it first writes that much other memory (untimed), so
//! the run starts with cold caches, as a stage's op does in a pipelined run (other
//! microbatches' ops ran in between); the CPU analogue of event_timer's L2 flush.
class thread_cpu_timer {
public:
  //! `flush_bytes`: memory written before each run (0: none).
  explicit thread_cpu_timer(std::size_t flush_bytes = 0) : flush_(flush_bytes) {}

  //! Runs `work()` once; returns the CPU seconds it took on this thread.
  template <std::invocable Work>
  double measure(Work&& work) {
    for (std::size_t i = 0; i < flush_.size(); i += 64) flush_[i] = static_cast<char>(flush_[i] + 1);
    const double start = thread_cpu_seconds();
    std::invoke(std::forward<Work>(work));
    return thread_cpu_seconds() - start;
  }

private:
  std::vector<char> flush_;
};

static_assert(profiling_timer<thread_cpu_timer>);

}  // namespace dflop::torch_trainer
