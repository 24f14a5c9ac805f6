// SPDX-License-Identifier: Apache-2.0
// The CUDA event timer and the profiler on a GPU: spinning kernels of known
// cycle counts time in proportion, and a profiled kernel's fit matches its medians.
#include "runtime_event_timer.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>

TEST_CASE("the event timer times kernels in proportion to their work, with or without an L2 flush",
          "[cuda][gpu][runtime]") {
  for (bool flush : {false, true}) {
    CAPTURE(flush);
    const double short_run = dflop::test::time_spin_kernel(2'000'000, flush);
    const double long_run = dflop::test::time_spin_kernel(8'000'000, flush);
    CHECK(short_run > 0);
    CHECK(long_run / short_run == Approx(4.0).epsilon(0.10));
  }
}

TEST_CASE("the profiler with the event timer fits a GPU kernel's cost and sees its memory", "[cuda][gpu][runtime]") {
  const auto check = dflop::test::profile_spin_kernel();
  for (std::size_t i = 0; i < check.sizes.size(); ++i) {
    CAPTURE(check.sizes[i]);
    CHECK(std::abs(check.forward_fitted[i] - check.forward_medians[i]) / check.forward_medians[i] < 0.05);
    // The forward's cudaMalloc and the backward's cudaFree fall inside the timed window: a loose ratio.
    CHECK(check.backward_medians[i] / check.forward_medians[i] == Approx(2.0).epsilon(0.15));
    // cudaMalloc rounds up to its granularity (2 MiB): at least what was kept, not much more.
    const double kept = check.sizes[i] * static_cast<double>(check.bytes_per_token);
    CHECK(check.activation_bytes[i] >= kept);
    CHECK(check.activation_bytes[i] < kept + (8 << 20));
  }
}
