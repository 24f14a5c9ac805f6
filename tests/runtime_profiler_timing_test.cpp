// SPDX-License-Identifier: Apache-2.0
// The profiler on the real steady clock: CPU stages that busy-wait a known
// a + b n + c n^2 (divided by the TP degree) are profiled, fitted, and the fit
// must recover the curve within 5% at every grid point. Runs in well under a second.
#include <dflop/runtime/profile_writer.hpp>
#include <dflop/runtime/profiler.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace {

//! Spins on the steady clock for `seconds` (deterministic work: no sleeping, no yielding).
void spin_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

//! A CPU stage with a known cost curve: forward t(n) = (a + b n + c n^2) / tp, backward 2 t(n).
//! Short runs (at most 0.4 ms) keep the chance that the scheduler preempts one small.
struct spinning_stage {
  double a = 5e-5, b = 2e-8, c = 4e-12;
  [[nodiscard]] double forward_seconds(const dflop::profile_case& at) const {
    return (a + b * at.size + c * at.size * at.size) / at.tp;
  }
  void forward(const dflop::profile_case& at) const { spin_for(forward_seconds(at)); }
  void backward(const dflop::profile_case& at) const { spin_for(2 * forward_seconds(at)); }
};

const dflop::module_piece llm_layer{dflop::module_kind::llm, dflop::module_part::layer};
const dflop::profile_grid grid{dflop::profile_size::tokens, {256, 512, 1024, 2048, 3072, 4096}, {1, 2}};

//! Profiles the stage, fits through the profile CSV, returns the worst relative error at the grid points.
double profile_and_fit(const spinning_stage& stage) {
  dflop::profiler<> profiler({.warmup = 2, .repeats = 15});
  profiler.measure(llm_layer, grid, stage);
  for (const auto& point : profiler.points()) {
    CHECK(point.forward.minimum >= stage.forward_seconds(point.at));  // a spin never ends early
    CHECK(point.forward.samples == 15);
  }
  // Through the CSV the table cost model reads, then the fit.
  const auto fitted =
      dflop::fitted_cost_model::from_profile(dflop::read_profile_text(dflop::profile_csv(profiler.table())));
  double worst = 0;
  for (int tp : grid.tp_degrees)
    for (double n : grid.sizes) {
      const auto predicted = fitted.estimate_part(llm_layer, tp, dflop::uniform_shape(1, n));
      const double truth = stage.forward_seconds({llm_layer, tp, dflop::profile_size::tokens, n});
      worst = std::max({worst, std::abs(predicted.forward - truth) / truth,
                        std::abs(predicted.backward - 2 * truth) / (2 * truth)});
    }
  return worst;
}

}  // namespace

TEST_CASE("the profiler recovers known CPU cost curves within 5%", "[runtime][profiler][timing]") {
  // Medians shrug off the odd preempted run; on a machine shared with other jobs,
  // a sweep may still catch a busy spell, so up to three sweeps are allowed.
  const spinning_stage stage;
  double worst = 1;
  int sweeps = 0;
  while (worst >= 0.05 && sweeps < 3) {
    worst = profile_and_fit(stage);
    ++sweeps;
  }
  std::printf("profiler timing: worst relative fit error at the grid points %.3f%% (%d sweep%s)\n", worst * 100,
              sweeps, sweeps > 1 ? "s" : "");
  CHECK(worst < 0.05);
}
