// SPDX-License-Identifier: Apache-2.0
// Multimodal stages that sleep for their cost take, run by the multimodal
// executor over threads, the iteration time `multimodal_simulator` predicts for
// the same schedule, costs and hand-off pattern (within 10%, median of 3 steps).
#include "exec_multimodal_support.hpp"
#include "exec_test_support.hpp"

#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim/multimodal.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

using namespace dflop;

TEST_CASE("executed multimodal iteration time matches the simulator's prediction", "[exec][multimodal][timing]") {
  const std::uint32_t m = 6;
  struct run_case {
    world_layout layout;
    pipeline_schedule schedule;
  };
  // Different data-parallel degrees on each side of the hand-off.
  const std::vector<run_case> cases{{world_layout({1, 1, 2}, {1, 2, 1}), one_f_one_b{}.make({3, m})},
                                    {world_layout({1, 1, 2}, {1, 2, 1}), zero_bubble_h1{}.make({3, m})},
                                    {world_layout({1, 2, 1}, {1, 1, 2}), one_f_one_b{}.make({3, m})}};
  for (const auto& c : cases) {
    const auto& layout = c.layout;
    INFO(c.schedule.name << ", encoder " << layout.replicas(module_kind::encoder) << "x" << layout.stages(module_kind::encoder) << ", llm "
                         << layout.replicas(module_kind::llm) << "x" << layout.stages(module_kind::llm));
    const auto data = test::make_batch(36, 23, m, layout.replicas(module_kind::encoder), layout.replicas(module_kind::llm));
    // 5 ms forwards, so an iteration is a few hundred milliseconds: thread wake-ups
    // (up to ~0.3 ms on small VMs) stay a few percent of it.
    const auto costs = test::sleep_costs(data, m, layout.stages(module_kind::encoder), layout.replicas(module_kind::encoder), layout.stages(module_kind::llm),
                                         layout.replicas(module_kind::llm), 5e-3, c.schedule.split_backward);
    const double predicted = simulate(c.schedule, costs).makespan;
    const int steps = 4;  // the first warms up the buffer pool and is not measured
    // A load spike on a shared machine only lengthens sleeps: a median outside
    // the band is measured again (up to 4 times) before it counts as a failure.
    std::vector<double> slowest(steps, 0.0);
    double measured = 0;
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::fill(slowest.begin(), slowest.end(), 0.0);
      std::mutex mutex;
      run_inproc(layout.world_size(), [&](inproc_communicator& comm) {
        const auto role = layout.role(comm.rank());
        multimodal_executor<inproc_communicator, test::sleep_module_stage> run(
            comm, layout, test::sleep_module_stage(&costs, role.encoder(), role.stage), {.watchdog_seconds = 10});
        for (int step = 0; step < steps; ++step) {
          const double seconds = run.step(c.schedule, data.view()).seconds;
          std::lock_guard lock(mutex);
          slowest[static_cast<std::size_t>(step)] = std::max(slowest[static_cast<std::size_t>(step)], seconds);
        }
      });
      measured = test::median({slowest.begin() + 1, slowest.end()});
      if (measured >= 0.98 * predicted && measured <= 1.10 * predicted) break;
    }
    INFO("predicted " << predicted << " s, measured " << measured << " s");
    CHECK(measured >= 0.98 * predicted);  // sleeps never end early
    CHECK(measured <= 1.10 * predicted);
  }
}
