// SPDX-License-Identifier: Apache-2.0
//! \file
//! How the profiler times one run of the profiled code: a timer policy is a
//! small value type with `double measure(work)`. `steady_clock_timer` times host
//! code; `dflop/cuda/event_timer.cuh` times GPU work with CUDA events. A timer
//! may also report memory in use (`memory_in_use()`, bytes), which the profiler
//! then probes around each forward pass.
#pragma once

#include <chrono>
#include <concepts>
#include <functional>
#include <utility>

namespace dflop {

namespace detail {
//! A stand-in for the profiled work, to check timer policies against.
struct timed_work_archetype {
  void operator()() const noexcept {}
};
}  // namespace detail

//! A timer policy: `timer.measure(work)` runs `work()` once and returns how long
//! it took, in seconds (for asynchronous devices: until the work completed).
template <class Timer>
concept profiling_timer = requires(Timer& timer, detail::timed_work_archetype work) {
  { timer.measure(work) } -> std::convertible_to<double>;
};

//! A timer policy that can also say how much memory is in use (bytes), e.g. the
//! CUDA event timer's device-memory probe.
template <class Timer>
concept memory_probing_timer = profiling_timer<Timer> && requires(Timer& timer) {
  { timer.memory_in_use() } -> std::convertible_to<double>;
};

//! Wall time on `std::chrono::steady_clock`: for host code, or device code that
//! synchronizes before returning.
struct steady_clock_timer {
  //! Runs `work()` once; returns its wall time in seconds.
  template <std::invocable Work>
  double measure(Work&& work) {
    const auto start = std::chrono::steady_clock::now();
    std::invoke(std::forward<Work>(work));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

static_assert(profiling_timer<steady_clock_timer>);

}  // namespace dflop
