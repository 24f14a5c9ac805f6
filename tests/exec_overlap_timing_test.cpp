// SPDX-License-Identifier: Apache-2.0
// A plan whose gradient reduction takes a good part of the iteration, run by
// emulated devices on threads with and without gradient buckets, all-reduced and
// with the distributed optimizer (reduce-scattered): each run
// takes the time the simulator predicts for its batch (within 10%, median of
// 3 steps), and the bucketed one is measured faster, by about what the
// prediction says overlap buys.
#include "plan_test_support.hpp"

#include <dflop/exec/emulated_stage.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

using namespace dflop;

namespace {

using test_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;
using emulated_runner = test_pipeline::runner<inproc_communicator, emulated_stage>;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median step time of `chosen` run on emulated devices (the first step warms up and is not counted).
double measured_seconds(const plan& chosen, const batch_schedule& batch, const std::vector<sample>& samples,
                        double time_scale) {
  const int steps = 4;
  std::vector<double> slowest(steps, 0.0);
  std::mutex mutex;
  run_inproc(chosen.cluster.gpus, [&](inproc_communicator& comm) {
    emulated_runner run(
        chosen, comm, [&](const stage_assignment& a) { return emulated_stage(a, chosen.model_spec, {.time_scale = time_scale}); },
        {.watchdog_seconds = 30}, plan_method::dflop, named_schedule(chosen.schedule));
    for (int step = 0; step < steps; ++step) {
      run.stage().begin_step(batch);
      const double seconds = run.step(batch, samples).seconds;
      std::lock_guard lock(mutex);
      slowest[static_cast<std::size_t>(step)] = std::max(slowest[static_cast<std::size_t>(step)], seconds);
    }
  });
  return median({slowest.begin() + 1, slowest.end()});
}

}  // namespace

TEST_CASE("emulated overlapped gradient reduction takes the time the simulator predicts", "[exec][emulation][timing]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  // Two GPUs per node: each replica's LLM stages share a node (their messages
  // move fast; the emulation does not time them), the replicas do not, and a
  // slow network makes the reduction a good part of the iteration.
  auto cluster = test::small_cluster(8, 2);
  cluster.gpu.inter_node_bandwidth = 2e9;
  planner_options options;
  options.global_batch = 48;
  options.batches = 1;
  options.baselines = false;
  options.threads = 1;
  const auto base = test_pipeline::make_plan(workload, model, cluster, options, {.schedule = named_schedule("1f1b")});
  const auto samples = sample_batch(workload, 48, batch_mode::without_replacement, 3);
  const double time_scale = 1;
  // Two replicas of a two-stage LLM and of the encoder: every stage reduces. All-reduced,
  // then with the distributed optimizer (reduce-scatters in buckets, a gather before the first op).
  for (const bool sharded : {false, true}) {
    plan chosen = test::with_configuration(base, {1, 1, 2, false, sharded}, {1, 2, 2, false, sharded}, 4);
    std::vector<double> predicted, measured;
    for (const double bucket : {0.0, 32e6}) {
      chosen.batch.gradient_bucket_bytes = bucket;
      const auto batch = test_pipeline::schedule_batch(chosen, samples, 1, plan_method::dflop, {.schedule = named_schedule("1f1b")});
      // The emulation sleeps compute and the gradient reduction but moves messages
      // at memory speed: its prediction is the batch's without link time.
      multimodal_costs without_links = batch.costs;
      for (module_costs* module : {&without_links.encoder, &without_links.llm})
        std::fill(module->transfer.begin(), module->transfer.end(), 0.0);
      for (handoff& link : without_links.handoffs) link.seconds = 0;
      const auto schedule = named_schedule("1f1b").make({without_links.positions(), without_links.microbatches});
      predicted.push_back(simulate(schedule, without_links, batch.slot_order).makespan * time_scale);
      double seconds = 0;
      for (int attempt = 0; attempt < 4; ++attempt) {  // a load spike only lengthens sleeps: measure again
        seconds = measured_seconds(chosen, batch, samples, time_scale);
        if (seconds >= 0.98 * predicted.back() && seconds <= 1.10 * predicted.back()) break;
      }
      measured.push_back(seconds);
      INFO((sharded ? "sharded, " : "") << "bucket " << bucket << ": predicted " << predicted.back() << " s, measured "
                                        << seconds << " s");
      CHECK(seconds >= 0.98 * predicted.back());
      CHECK(seconds <= 1.10 * predicted.back());
    }
    INFO((sharded ? "sharded: " : "") << "predicted " << predicted[0] << " -> " << predicted[1] << " s, measured "
                                      << measured[0] << " -> " << measured[1]);
    CHECK(predicted[1] < 0.96 * predicted[0]);  // the case is one where overlap matters
    CHECK(measured[1] < measured[0]);
  }
}
