// SPDX-License-Identifier: Apache-2.0
// plan -> schedule_batch -> plan_runner::step, on threads: every rank of a plan
// builds its stage from its assignment and runs the scheduled batch with the
// multimodal executor. Losses and gradients equal the multimodal sequential
// reference run over the same scheduled lists (bitwise where every DP and TP
// degree is 1, 1e-12 otherwise), for planner plans, their baselines and hand-set
// configurations with TP and PP on both modules; misuse gives clear errors.
#include "exec_multimodal_support.hpp"
#include "gradient_difference.hpp"
#include "plan_test_support.hpp"

#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace dflop;

namespace {

using test_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;
using toy_runner = test_pipeline::runner<inproc_communicator, test::toy_encoder_stage, test::toy_llm_stage>;

struct run_output {
  std::vector<double> losses;                  // per step (rank 0's)
  std::vector<std::vector<double>> gradients;  // per position, last step: replica 0, summed over its TP ranks
  bool replicas_agree = true;
  bool losses_agree = true;  // every rank reports the same step loss
};

// Runs `batches` of `chosen` (method `method`) on threads, one rank per GPU of the plan.
run_output run_plan(const plan& chosen, plan_method method, const std::vector<std::vector<sample>>& batches,
                    const std::vector<batch_schedule>& scheduled) {
  run_output out;
  out.losses.assign(batches.size(), 0.0);
  std::vector<std::vector<double>> rank_losses(batches.size(), std::vector<double>(static_cast<std::size_t>(chosen.cluster.gpus)));
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<double>> seen;  // (position, TP rank) -> gradients
  std::map<std::uint32_t, std::vector<double>> summed;
  std::mutex mutex;
  run_inproc(chosen.cluster.gpus, [&](inproc_communicator& comm) {
    toy_runner run(chosen, comm, test::make_toy_stage, {.watchdog_seconds = 20}, method, named_schedule(chosen.schedule));
    test::connect_tensor_group(run.stage(), run.executor().tensor_group());
    for (std::size_t step = 0; step < batches.size(); ++step) {
      std::visit([](auto& s) { std::ranges::fill(s.gradients(), 0.0); }, run.stage());
      const auto result = run.step(scheduled[step], batches[step]);
      rank_losses[step][static_cast<std::size_t>(comm.rank())] = result.loss;
    }
    const auto& role = run.assignment().role;
    const auto g = std::visit([](auto& s) { return s.gradients(); }, run.stage());
    const std::vector<double> values(g.begin(), g.end());
    std::lock_guard lock(mutex);
    if (role.replica == 0) {
      auto& sum = summed[role.position];
      sum.resize(values.size(), 0.0);
      for (std::size_t i = 0; i < values.size(); ++i) sum[i] += values[i];  // TP shards are disjoint
    }
    auto& first = seen[{role.position, role.tp_rank}];
    if (first.empty()) first = values;
    else if (first != values) out.replicas_agree = false;
  });
  for (auto& [position, values] : summed) out.gradients.push_back(std::move(values));
  for (std::size_t step = 0; step < batches.size(); ++step) {
    out.losses[step] = rank_losses[step][0];
    for (double loss : rank_losses[step]) out.losses_agree = out.losses_agree && loss == out.losses[step];
  }
  return out;
}

struct reference_output {
  std::vector<double> losses;
  std::vector<std::vector<double>> gradients;  // per position, last step
};

reference_output run_reference(const plan_layout& layout, const std::vector<std::vector<sample>>& batches,
                               const std::vector<batch_schedule>& scheduled) {
  test::toy_reference stages(layout.config);
  reference_output out;
  for (std::size_t step = 0; step < batches.size(); ++step)
    out.losses.push_back(stages.step(executable_batch(scheduled[step], batches[step]),
                                     static_cast<std::uint32_t>(layout.config.microbatches)));
  for (std::uint32_t p = 0; p < static_cast<std::uint32_t>(layout.config.stages()); ++p)
    out.gradients.emplace_back(stages.gradients(p).begin(), stages.gradients(p).end());
  return out;
}

// Runs `method` of `chosen` on `count` global batches and compares with the reference.
void check_against_reference(const plan& chosen, plan_method method, std::size_t count,
                             const std::vector<sample>& workload) {
  const auto& run = chosen.method(method);
  INFO(method << ": " << run.config << ", encoder " << run.encoder << ", llm " << run.llm << ", schedule "
              << chosen.schedule);
  std::vector<std::vector<sample>> batches;
  std::vector<batch_schedule> scheduled;
  for (std::size_t k = 0; k < count; ++k) {
    batches.push_back(sample_batch(workload, static_cast<std::size_t>(chosen.global_batch),
                                   batch_mode::without_replacement, 100 + k));
    scheduled.push_back(test_pipeline::schedule_batch(chosen, batches.back(), k, method,
                                                      {.schedule = named_schedule(chosen.schedule)}));
    REQUIRE(scheduled.back().config == run.config);
  }
  const plan_layout layout = make_plan_layout(chosen, method, named_schedule(chosen.schedule));
  const auto reference = run_reference(layout, batches, scheduled);
  const auto got = run_plan(chosen, method, batches, scheduled);
  // The toy stages' TP math sums partial products over the group: another order
  // of additions than the reference's, so bitwise only without DP and TP.
  const bool bitwise = run.config.encoder.dp * run.config.encoder.tp * run.config.llm.dp * run.config.llm.tp == 1;
  CHECK(got.losses_agree);
  CHECK(got.replicas_agree);
  for (std::size_t step = 0; step < count; ++step) {
    INFO("step " << step << ": loss " << got.losses[step] << " vs " << reference.losses[step]);
    if (bitwise) CHECK(got.losses[step] == reference.losses[step]);
    else CHECK(std::abs(got.losses[step] - reference.losses[step]) <= 1e-12 * std::abs(reference.losses[step]));
  }
  REQUIRE(got.gradients.size() == reference.gradients.size());
  for (std::size_t p = 0; p < got.gradients.size(); ++p) {
    INFO("position " << p);
    CHECK(*std::max_element(reference.gradients[p].begin(), reference.gradients[p].end()) > 0);  // real gradients
    if (bitwise) {
      CHECK(got.gradients[p] == reference.gradients[p]);
    } else {
      const auto [scale, diff] = test::compare_gradients(got.gradients[p], reference.gradients[p]);
      CHECK(diff <= 1e-12 * scale);
    }
  }
}

planner_options quick_options(int global_batch) {
  planner_options options;
  options.global_batch = global_batch;
  options.batches = 2;
  options.batch.order_budget = 8;
  options.threads = 1;
  return options;
}

// dflop's plan (no baselines) for a preset model on `gpus` H100s, 8 to a node.
plan plan_on_h100s(const char* model, int gpus, int global_batch, const std::vector<sample>& workload) {
  auto options = quick_options(global_batch);
  options.baselines = false;
  return test_pipeline::make_plan(workload, find_model(model), cluster_spec{gpus, 8, find_gpu("h100-80gb")}, options);
}

}  // namespace

TEST_CASE("plan_runner runs a planner's plan and both baselines like the sequential reference", "[exec][runner]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    const auto chosen = test_pipeline::make_plan(workload, model, test::small_cluster(8, 4), quick_options(32), {.schedule = named_schedule(schedule)});
    REQUIRE(chosen.schedule == schedule);
    for (const plan_method method : all_plan_methods) check_against_reference(chosen, method, 2, workload);
  }
}

TEST_CASE("plan_runner: TP and PP on both modules, DP on either side, every one-chunk schedule", "[exec][runner]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  const auto base = test_pipeline::make_plan(workload, model, test::small_cluster(8, 4), quick_options(32));
  struct shape {
    module_parallelism encoder, llm;
    int m;
  };
  for (const auto& s : {shape{{1, 1, 1}, {2, 2, 1}, 4}, shape{{2, 2, 1}, {2, 2, 1}, 3}, shape{{1, 1, 2}, {2, 2, 1}, 4},
                        shape{{1, 2, 1}, {1, 2, 2}, 3}, shape{{2, 1, 2}, {2, 2, 2}, 4}})
    for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
      plan chosen = test::with_configuration(base, s.encoder, s.llm, s.m);
      chosen.schedule = schedule;
      check_against_reference(chosen, plan_method::dflop, 1, workload);
    }
}

TEST_CASE("plan_runner: an encoder running ahead of the schedule's warm-up runs like the reference", "[exec][runner]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  const auto base = test_pipeline::make_plan(workload, model, test::small_cluster(8, 4), quick_options(32));
  for (const int ahead : {1, 3, 8})
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      plan chosen = test::with_configuration(base, {1, 2, 1}, {1, 2, 2}, 8);
      chosen.chosen.config.encoder_run_ahead = ahead;
      chosen.schedule = schedule;
      check_against_reference(chosen, plan_method::dflop, 1, workload);
      // What the runner ran: the first encoder stage holds `ahead` more microbatches than the schedule's 4.
      const auto layout = make_plan_layout(chosen, plan_method::dflop, named_schedule(schedule));
      CHECK(peak_activations(layout.schedule).front() == std::min(8U, 4U + static_cast<std::uint32_t>(ahead)));
    }
}

TEST_CASE("plan_runner: the 16-GPU onevision plan of siglip-400m+qwen2.5-7b runs", "[exec][runner]") {
  const auto workload = generate_mixture("onevision", 2000, 3);
  const auto chosen = plan_on_h100s("siglip-400m+qwen2.5-7b", 16, 128, workload);
  REQUIRE(chosen.chosen.config.gpus() == 16);
  check_against_reference(chosen, plan_method::dflop, 1, workload);
}

TEST_CASE("plan_runner: a planner's plan with TP and PP in the LLM (a model too big for one GPU) runs", "[exec][runner]") {
  const auto workload = generate_mixture("onevision", 2000, 5);
  const auto chosen = plan_on_h100s("siglip-400m+qwen2.5-32b", 16, 64, workload);
  INFO(chosen.chosen.config);
  REQUIRE(chosen.chosen.config.llm.tp >= 2);
  REQUIRE(chosen.chosen.config.llm.pp >= 2);
  check_against_reference(chosen, plan_method::dflop, 1, workload);
}

TEST_CASE("plan_runner: clear errors for a wrong world, method, schedule or batch", "[exec][runner]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  auto options = quick_options(32);
  options.baselines = false;
  const auto chosen = test_pipeline::make_plan(workload, model, test::small_cluster(8, 4), options);
  const auto needs = std::to_string(chosen.cluster.gpus);

  std::vector<std::string> errors;
  std::mutex mutex;
  const auto expect_error = [&](int ranks, auto&& body) {
    run_inproc(ranks, [&](inproc_communicator& comm) {
      try {
        body(comm);
      } catch (const input_error& e) {
        if (comm.rank() == 0) {
          std::lock_guard lock(mutex);
          errors.emplace_back(e.what());
        }
      }
    });
  };
  expect_error(3, [&](inproc_communicator& comm) { toy_runner run(chosen, comm, test::make_toy_stage); });
  REQUIRE(errors.size() == 1);
  CHECK_THAT(errors.back(), Catch::Contains("the plan runs on " + needs + " GPUs") && Catch::Contains("3 ranks"));

  expect_error(1, [&](inproc_communicator& comm) { toy_runner run(chosen, comm, test::make_toy_stage, {}, plan_method::data_blind); });
  REQUIRE(errors.size() == 2);
  CHECK_THAT(errors.back(), Catch::Contains("no method 'data_blind'"));

  expect_error(1, [&](inproc_communicator& comm) {
    toy_runner run(chosen, comm, test::make_toy_stage, {}, plan_method::dflop, named_schedule("gpipe"));
  });
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors.back(), Catch::Contains("made for schedule '1f1b'") && Catch::Contains("'gpipe'"));

  // A batch scheduled for another configuration is refused before anything runs.
  const plan other = test::with_configuration(chosen, {1, 1, 1}, {1, 1, 1}, 2);
  const auto samples = sample_batch(workload, 32, batch_mode::without_replacement, 5);
  const auto foreign = test_pipeline::schedule_batch(other, samples);
  std::vector<std::string> step_errors(static_cast<std::size_t>(chosen.cluster.gpus));
  run_inproc(chosen.cluster.gpus, [&](inproc_communicator& comm) {
    toy_runner run(chosen, comm, test::make_toy_stage);
    try {
      (void)run.step(foreign, samples);
    } catch (const input_error& e) {
      step_errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  for (const auto& text : step_errors) CHECK_THAT(text, Catch::Contains("the batch was scheduled for"));
}
