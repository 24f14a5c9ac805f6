// SPDX-License-Identifier: Apache-2.0
//! \file
//! Sleeping for an op's cost, accurately: emulated devices and the timing tests
//! compare executed iterations with the simulator, and a plain sleep overshoots by the machine's
//! timer granularity (measured from 50 to 300 microseconds per call on the VMs
//! this runs on), which over a pipeline's critical path adds far more than the
//! executor's own overhead. Spinning to the deadline is no cure: with four
//! ranks on two cores the spinners starve the ranks that must wake. So the
//! overshoot is measured once and each sleep asks for that much less.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace dflop {

//! The median overshoot of a 1 ms sleep on this machine (seconds), measured on first use.
inline double sleep_overshoot() {
  static const double overshoot = [] {
    using clock = std::chrono::steady_clock;
    std::vector<double> samples;
    for (int i = 0; i < 21; ++i) {
      const auto start = clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      samples.push_back(std::chrono::duration<double>(clock::now() - start).count() - 1e-3);
    }
    std::nth_element(samples.begin(), samples.begin() + 10, samples.end());
    return std::max(0.0, samples[10]);
  }();
  return overshoot;
}

//! Returns about `seconds` after it was called: sleeps for `seconds` less the
//! machine's typical overshoot, then yields until the deadline if woken early.
inline void sleep_precisely(double seconds) {
  using clock = std::chrono::steady_clock;
  const auto deadline =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  const double asked = seconds - sleep_overshoot();
  if (asked > 0) std::this_thread::sleep_for(std::chrono::duration<double>(asked));
  while (clock::now() < deadline) std::this_thread::yield();
}

}  // namespace dflop
