// SPDX-License-Identifier: Apache-2.0
// A planner's 8-GPU plan run by plan_runner over MPI (run under `mpirun -np 8`),
// one rank per process: every method's loss and this rank's gradients match the
// multimodal sequential reference over the same scheduled lists (1e-12; the
// plan has data-parallel replicas). Every process plans and schedules alone, as
// a real trainer's ranks do: the plans and batches must agree for the run to.
#include "mpi_catch_main.hpp"
#include "../exec_multimodal_support.hpp"
#include "../plan_test_support.hpp"

#include <dflop/exec/mpi_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>
#include <mpi.h>

#include <cmath>
#include <vector>

using namespace dflop;

namespace {

using test::world_size;
using test_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;
using toy_runner = test_pipeline::runner<mpi_communicator, test::toy_encoder_stage, test::toy_llm_stage>;

}  // namespace

TEST_CASE("MPI: an 8-GPU plan's every method through plan_runner, within 1e-12 of the reference", "[exec][mpi][runner]") {
  if (world_size() != 8) return;
  const auto workload = test::small_workload();
  planner_options options;
  options.global_batch = 48;
  options.batches = 2;
  options.batch.order_budget = 8;
  options.threads = 1;
  const auto chosen = test_pipeline::make_plan(workload, test::small_model(), test::small_cluster(8, 4), options);
  REQUIRE(chosen.cluster.gpus == 8);
  const test_pipeline::policies with{.schedule = named_schedule(chosen.schedule)};
  const auto samples = sample_batch(workload, 48, batch_mode::without_replacement, 7);
  mpi_communicator world(MPI_COMM_WORLD, 20);
  for (const plan_method method : all_plan_methods) {
    const auto& run_method = chosen.method(method);
    INFO(method << ": " << run_method.config);
    const auto batch = test_pipeline::schedule_batch(chosen, samples, 3, method, with);

    test::toy_reference reference(run_method.config);
    const double expected =
        reference.step(executable_batch(batch, samples), static_cast<std::uint32_t>(run_method.config.microbatches));

    toy_runner run(chosen, world, test::make_toy_stage, {.watchdog_seconds = 20}, method, named_schedule(chosen.schedule));
    test::connect_tensor_group(run.stage(), run.executor().tensor_group());
    const auto result = run.step(batch, samples);
    CHECK(std::abs(result.loss - expected) <= 1e-12 * std::abs(expected));

    // This rank's gradients: its TP shard of its position's reference gradients.
    const auto& role = run.assignment().role;
    const auto got = std::visit([](auto& s) { return s.gradients(); }, run.stage());
    const auto want = reference.gradients(role.position);
    REQUIRE(got.size() == want.size());
    std::vector<double> shard(want.begin(), want.end());
    std::vector<double> mine(got.begin(), got.end());
    if (run.assignment().tp_size > 1) {  // TP shards are disjoint: compare the sum over the TP group
      run.executor().tensor_group().all_reduce_sum(gradient_buffer::of(std::span<double>(mine)));
    }
    const auto [scale, diff] = test::compare_gradients(mine, shard);
    INFO("position " << role.position << " replica " << role.replica << " tp " << role.tp_rank);
    CHECK(scale > 0);
    CHECK(diff <= 1e-12 * scale);
  }
}
