// SPDX-License-Identifier: Apache-2.0
// dflop-cuda-trainer's plan runs (examples/cuda_trainer). The trainer's model
// gives a batch the same loss whatever the plan, so for every method of a small
// plan (and hand-set configurations with TP and PP on both modules, each
// one-chunk schedule):
// - every rank reports the same step loss, and step 0's loss and gradient norm
//   equal the host computation (reference.hpp, sample by sample);
// - one step on the same batch (w -= rate g / |g|) lowers the loss by rate x |g|
//   to first order: the gradients, summed over stages, replicas and the hand-off, are right;
// - after that step the loss is the same for every method.
// The stage runs on the host (host backend, threads: everywhere) and on one GPU's
// streams (CUDA backend, stream_communicator: label gpu).
#include "../../examples/cuda_trainer/device_runs.hpp"
#include "../../examples/cuda_trainer/host_backend.hpp"
#include "../../examples/cuda_trainer/reference.hpp"
#include "../../examples/cuda_trainer/trainer_inputs.hpp"
#include "../plan_test_support.hpp"

#include <dflop/exec/inproc_communicator.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace dflop;
using namespace dflop::cuda_trainer;

namespace {

// Runs every rank of `inputs`; returns each rank's reports.
using plan_run = std::function<std::vector<std::vector<step_report>>(const trainer_inputs&, const run_options&)>;

std::vector<std::vector<step_report>> run_on_host(const trainer_inputs& inputs, const run_options& options) {
  std::vector<std::vector<step_report>> reports(static_cast<std::size_t>(inputs.chosen.cluster.gpus));
  run_inproc(inputs.chosen.cluster.gpus, [&](inproc_communicator& world) {
    reports[static_cast<std::size_t>(world.rank())] = train_rank<host_backend>(world, inputs, options);
  });
  return reports;
}

std::vector<std::vector<step_report>> run_on_gpu(const trainer_inputs& inputs, const run_options& options) {
  return run_on_one_gpu(inputs, options, 0);
}

const std::vector<sample>& workload() {
  static const auto pool = default_workload();
  return pool;
}

const plan& builtin() {
  static const plan chosen = builtin_plan(workload(), input_options{});
  return chosen;
}

// `method` of `chosen` on one batch, twice: step 0, a gradient step, step 1 on the same batch.
struct two_steps {
  double loss = 0;       // step 0
  double after = 0;      // step 1
  double predicted = 0;  // step 0's loss - rate x |g|
};

two_steps run_twice(const plan_run& run, const plan& chosen, const std::string& method, const run_options& base,
                    double tolerance) {
  input_options io;
  io.method = method;
  io.steps = 1;
  io.seed = 7;
  auto inputs = schedule_steps(chosen, workload(), io);
  inputs.batches.push_back(inputs.batches.front());
  inputs.scheduled.push_back(inputs.scheduled.front());
  run_options options = base;
  options.method = method;
  const reference_figures reference = reference_step(inputs.batches.front(), chosen.model_spec, options.model);
  const double host = reference.loss;
  // A rate that lowers the loss by about 1e-4 of it: from a first run without one.
  options.learning_rate = 0;
  const auto probe = run(inputs, options);
  const double norm = probe.front().front().gradient_norm;
  REQUIRE(norm > 0);
  options.learning_rate = 1e-4 * host / norm;
  const auto ranks = run(inputs, options);

  INFO(method << ": " << chosen.method(method).config << ", schedule " << chosen.schedule);
  REQUIRE(ranks.size() == static_cast<std::size_t>(chosen.cluster.gpus));
  two_steps out{ranks.front()[0].loss, ranks.front()[1].loss, 0};
  out.predicted = out.loss - options.learning_rate * norm;
  for (const auto& rank : ranks) {
    REQUIRE(rank.size() == 2);
    CHECK(rank[0].loss == out.loss);
    CHECK(rank[1].loss == out.after);
  }
  CHECK(probe.front().front().loss == out.loss);
  CHECK(ranks.front()[0].gradient_norm == Approx(norm).epsilon(tolerance));
  INFO("loss " << out.loss << ", host " << host << "; gradient norm " << norm << ", host " << reference.gradient_norm
               << "; after the step " << out.after << ", first order " << out.predicted);
  CHECK(std::abs(out.loss - host) <= tolerance * host);
  CHECK(norm == Approx(reference.gradient_norm).epsilon(tolerance));
  const double decrease = out.loss - out.after;
  const double expected = out.loss - out.predicted;
  CHECK(decrease > 0);
  CHECK(std::abs(decrease - expected) <= 0.01 * expected);  // second-order terms: well below 1%
  return out;
}

void check_methods(const plan_run& run, const run_options& options, double tolerance) {
  std::vector<two_steps> results;
  for (const char* method : {"dflop", "data_blind", "dflop_reference"})
    results.push_back(run_twice(run, builtin(), method, options, tolerance));
  for (const auto& r : results) {
    CHECK(r.loss == Approx(results.front().loss).epsilon(tolerance));
    CHECK(r.after == Approx(results.front().after).epsilon(1e-8));  // the rates differ only by the norms' rounding
  }
}

void check_shapes(const plan_run& run, const run_options& options, double tolerance) {
  struct shape {
    module_parallelism encoder, llm;
    int m;
  };
  const double loss = run_twice(run, builtin(), "dflop", options, tolerance).loss;
  for (const auto& s : {shape{{1, 2, 1}, {1, 3, 1}, 4}, shape{{2, 1, 2}, {2, 2, 1}, 3}, shape{{2, 2, 1}, {1, 2, 2}, 4}})
    for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
      plan chosen = test::with_configuration(builtin(), s.encoder, s.llm, s.m);
      chosen.schedule = schedule;
      CHECK(run_twice(run, chosen, "dflop", options, tolerance).loss == Approx(loss).epsilon(tolerance));
    }
}

run_options small_model() {
  run_options options;
  options.model.hidden = 16;
  options.model.tokens_per_row = 512;
  options.watchdog = 30;
  return options;
}

// Every rank's `steps` step reports of `reference` and `other` agree in loss and
// gradient norm (relative 1e-12); `also(reference step, other step)` checks more.
template <class Also>
void check_same_training(const std::vector<std::vector<step_report>>& reference,
                         const std::vector<std::vector<step_report>>& other, std::size_t steps, Also also) {
  REQUIRE(reference.size() == other.size());
  for (std::size_t r = 0; r < reference.size(); ++r) {
    REQUIRE(other[r].size() == steps);
    for (std::size_t k = 0; k < steps; ++k) {
      CHECK(other[r][k].loss == Approx(reference[r][k].loss).epsilon(1e-12));
      CHECK(other[r][k].gradient_norm == Approx(reference[r][k].gradient_norm).epsilon(1e-12));
      also(reference[r][k], other[r][k]);
    }
  }
}

}  // namespace

TEST_CASE("cuda trainer: the built-in plan's methods differ, so the runs cover PP, TP and DP", "[cuda_trainer]") {
  const auto& dflop = builtin().method("dflop").config;
  const auto& reference = builtin().method("dflop_reference").config;
  CHECK(builtin().cluster.gpus == 4);
  CHECK(dflop.llm.pp > 1);
  CHECK((reference.llm.tp > 1 || reference.encoder.dp > 1));
}

TEST_CASE("cuda trainer: the stage on the host runs every method of a plan to the host loss and a true gradient",
          "[cuda_trainer]") {
  check_methods(run_on_host, small_model(), 1e-12);
}

TEST_CASE("cuda trainer: the stage on the host with TP and PP on both modules, every one-chunk schedule",
          "[cuda_trainer]") {
  check_shapes(run_on_host, small_model(), 1e-12);
}

TEST_CASE("cuda trainer: with the plan's gradient buckets the last B starts each bucket's sum, the steps unchanged",
          "[cuda_trainer]") {
  // Two replicas of each module (encoder tp2 pp1 dp2, LLM tp1 pp2 dp2), so every
  // stage's sums run over a group. The plan's bucket size must split the real
  // model's gradients (what the simulator prices) into at most 1e6 buckets: 16
  // KiB, 8 of this small model's layers per bucket.
  plan chosen = test::with_configuration(builtin(), {2, 1, 2}, {1, 2, 2}, 4);
  input_options io;
  io.steps = 2;
  io.seed = 3;
  const run_options options = small_model();
  chosen.batch.gradient_bucket_bytes = 0;  // one sum per stage after the last op (the default is 25 MiB)
  const auto plain = run_on_host(schedule_steps(chosen, workload(), io), options);
  const double bucket = 16 * 1024;
  chosen.batch.gradient_bucket_bytes = bucket;
  const auto bucketed = run_on_host(schedule_steps(chosen, workload(), io), options);
  std::size_t overlapped = 0;
  check_same_training(plain, bucketed, 2, [&](const step_report& unbucketed, const step_report& with_buckets) {
    CHECK(unbucketed.overlapped_sums == 0);
    overlapped += with_buckets.overlapped_sums;
  });
  // Each stage's layers in runs of ceil(bucket / layer bytes), the last shorter:
  // one sum per run, on every TP rank of every replica, every step.
  const double layer_bytes = static_cast<double>(layer_parameters(options.model.hidden) * sizeof(double));
  const auto per_bucket = static_cast<std::int64_t>(std::ceil(bucket / layer_bytes));
  std::size_t expected = 0;
  for (const module_plan* module : {&chosen.chosen.encoder, &chosen.chosen.llm})
    for (std::size_t s = 0; s + 1 < module->first_layer.size(); ++s) {
      const std::int64_t layers = module->first_layer[s + 1] - module->first_layer[s];
      expected += static_cast<std::size_t>((layers + per_bucket - 1) / per_bucket * module->degrees.tp *
                                           module->degrees.dp);
    }
  CHECK(expected > static_cast<std::size_t>(chosen.method("dflop").config.gpus()));  // some stage has several buckets
  CHECK(overlapped == 2 * expected);
}

TEST_CASE("cuda trainer: the distributed optimizer steps each replica's shard and trains as the whole update does",
          "[cuda_trainer]") {
  // Two replicas of each module; sharded, each rank's norm counts its shard of
  // each bucket (the remainders once) and SGD steps only that, then the next step
  // gathers the parameters: every step's loss and gradient norm are the
  // unsharded run's, without buckets and with 16 KiB ones (whose reduce-scatters
  // start inside the last B).
  input_options io;
  io.steps = 3;
  io.seed = 5;
  const run_options options = small_model();
  const plan whole = test::with_configuration(builtin(), {2, 1, 2}, {1, 2, 2}, 4);
  const plan sharded = test::with_configuration(builtin(), {2, 1, 2, false, true}, {1, 2, 2, false, true}, 4);
  for (const double bucket : {0.0, 16.0 * 1024}) {
    plan plain_plan = whole, sharded_plan = sharded;
    plain_plan.batch.gradient_bucket_bytes = sharded_plan.batch.gradient_bucket_bytes = bucket;
    const auto plain = run_on_host(schedule_steps(plain_plan, workload(), io), options);
    const auto shards = run_on_host(schedule_steps(sharded_plan, workload(), io), options);
    INFO("bucket " << bucket);
    std::size_t started = 0;
    check_same_training(plain, shards, 3, [&](const step_report& whole_update, const step_report& sharded_update) {
      CHECK(whole_update.optimizer_members == 1);
      CHECK(sharded_update.optimizer_members == 2);
      started += sharded_update.overlapped_sums;
    });
    CHECK((started > 0) == (bucket > 0));
  }
}

TEST_CASE("cuda trainer: CUDA stages on one GPU's streams run every method of a plan to the host loss",
          "[cuda_trainer][gpu]") {
  run_options options;  // the trainer's defaults: 64-wide rows
  options.watchdog = 30;
  check_methods(run_on_gpu, options, 1e-9);
}

TEST_CASE("cuda trainer: CUDA stages with TP and PP on both modules, every one-chunk schedule", "[cuda_trainer][gpu]") {
  check_shapes(run_on_gpu, small_model(), 1e-9);
}
