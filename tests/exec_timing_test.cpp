// SPDX-License-Identifier: Apache-2.0
// Stages that sleep for their cost take, run by the executor, the iteration time
// the simulator predicts for the same schedule and costs (within 10%, median of runs).
#include "exec_test_support.hpp"

#include <dflop/exec/executor.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

using namespace dflop;

TEST_CASE("executed iteration time matches the simulator's prediction", "[exec][timing]") {
  const std::uint32_t ranks = 4;
  const std::uint32_t m = 8;
  const auto samples = generate_mixture("onevision", 32, 21);
  const auto lists = contiguous_microbatches(samples.size(), m);
  const step_batch batch{samples, lists};
  const auto schedules = {gpipe{}.make({ranks, m}), one_f_one_b{}.make({ranks, m}), interleaved_1f1b{2}.make({ranks, m}),
                          zero_bubble_h1{}.make({ranks, m})};
  for (const auto& schedule : schedules) {
    INFO(schedule.name);
    // 5 ms forwards per rank (spread over chunks), so an iteration is ~150-250 ms: long enough
    // that thread wake-ups (up to ~0.3 ms on small VMs) stay a few percent of it.
    auto costs = spread_over_chunks(test::token_costs(batch, m, ranks, 5e-3, schedule.split_backward), schedule.chunks);
    const double predicted = simulate(schedule, costs).makespan;
    const int steps = 6;  // the first warms up the buffer pool and is not measured
    // A load spike on a shared machine only lengthens sleeps: a measurement
    // outside the band is repeated (up to 4 times) before it counts as a failure.
    std::vector<double> slowest(steps, 0.0);
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::fill(slowest.begin(), slowest.end(), 0.0);
      std::mutex mutex;
      run_inproc(static_cast<int>(ranks), [&](inproc_communicator& comm) {
        const auto rank = static_cast<std::uint32_t>(comm.rank());
        std::vector<test::sleep_stage> stages;
        for (std::uint32_t c = 0; c < schedule.chunks; ++c) stages.emplace_back(&costs, c * ranks + rank);
        executor<inproc_communicator, test::sleep_stage> run(comm, ranks, std::move(stages), {.watchdog_seconds = 10});
        for (int step = 0; step < steps; ++step) {
          const double seconds = run.step(schedule, batch).seconds;
          std::lock_guard lock(mutex);
          slowest[static_cast<std::size_t>(step)] = std::max(slowest[static_cast<std::size_t>(step)], seconds);
        }
      });
      const double attempt_median = test::median({slowest.begin() + 1, slowest.end()});
      if (attempt_median >= 0.98 * predicted && attempt_median <= 1.10 * predicted) break;
    }
    const double measured = test::median({slowest.begin() + 1, slowest.end()});
    INFO("predicted " << predicted << " s, measured " << measured << " s");
    CHECK(measured >= 0.98 * predicted);  // sleeps never end early
    CHECK(measured <= 1.10 * predicted);
  }
}
