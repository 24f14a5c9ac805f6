// SPDX-License-Identifier: Apache-2.0
// Emulated devices run a plan's every method on threads: each sample's stamp
// arrives where it should (the stage checks it), every sample is counted once
// (the loss is N (N + 1) / 2 on every rank), and block sizes are per-sample sums
// scaled from the model's activation sizes.
#include "plan_test_support.hpp"

#include <dflop/exec/emulated_stage.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

using namespace dflop;

namespace {

using test_pipeline = pipeline<flops_cost_model, min_max_layers, refined_packer, named_schedule>;
using emulated_runner = test_pipeline::runner<inproc_communicator, emulated_stage>;

planner_options quick_options() {
  planner_options options;
  options.global_batch = 48;
  options.batches = 2;
  options.batch.order_budget = 8;
  options.threads = 1;
  return options;
}

}  // namespace

TEST_CASE("emulated stages run every method of a plan; every sample arrives where it should, once",
          "[exec][runner][emulation]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    const auto chosen = test_pipeline::make_plan(workload, model, test::small_cluster(8, 4), quick_options(),
                                                 {.schedule = named_schedule(schedule)});
    for (const plan_method method : all_plan_methods) {
      INFO(schedule << " " << method);
      const auto samples = sample_batch(workload, 48, batch_mode::without_replacement, 3);
      const auto batch = test_pipeline::schedule_batch(chosen, samples, 1, method, {.schedule = named_schedule(schedule)});
      std::vector<double> losses(static_cast<std::size_t>(chosen.cluster.gpus), -1);
      std::vector<std::string> failures;
      std::mutex mutex;
      run_inproc(chosen.cluster.gpus, [&](inproc_communicator& comm) {
        try {
          emulated_runner run(
              chosen, comm, [&](const stage_assignment& a) { return emulated_stage(a, model, {.time_scale = 0}); },
              {.watchdog_seconds = 20}, method, named_schedule(schedule));
          for (int step = 0; step < 2; ++step) {
            run.stage().begin_step(batch);
            losses[static_cast<std::size_t>(comm.rank())] = run.step(batch, samples).loss;
          }
        } catch (const std::exception& e) {
          std::lock_guard lock(mutex);
          failures.emplace_back(e.what());
        }
      });
      CHECK(failures.empty());
      for (const auto& f : failures) INFO(f);
      const double n = static_cast<double>(samples.size());
      for (double loss : losses) CHECK(loss == n * (n + 1) / 2);
    }
  }
}

TEST_CASE("emulated stages: blocks are per-sample, scaled from the model's activation sizes", "[exec][emulation]") {
  const auto model = test::small_model();
  const parallel_config config{{1, 2, 1}, {2, 2, 1}, 2};
  const plan_layout layout = make_plan_layout(config, module_plan{config.encoder, {0, 3, 6}},
                                              module_plan{config.llm, {0, 4, 8}}, named_schedule("1f1b"));
  std::vector<sample> samples(3);
  samples[0].encoder_tokens = 729;
  samples[0].llm_tokens = 1000;
  samples[1].llm_tokens = 300;  // text only
  samples[2].encoder_tokens = 7 * 729;
  samples[2].llm_tokens = 5000;
  const std::vector<std::uint32_t> all{0, 1, 2};
  const microbatch_view mb(samples, all);
  const double scale = 1.0 / 512;
  const auto words = [](double bytes) { return bytes <= 0 ? 0 : 8 * std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(bytes / 8))); };
  const auto stage_at = [&](int rank) { return emulated_stage(assignment_of(layout, rank), model, {.byte_scale = scale}); };
  // Ranks: encoder stage 0, encoder stage 1, LLM stage 0 (2 TP ranks), LLM stage 1 (2 TP ranks).
  const auto encoder_first = stage_at(0), encoder_last = stage_at(1), llm_first = stage_at(2), llm_last = stage_at(4);
  const auto encoder_rows = [&](double hidden_bytes) {
    return words(729 * hidden_bytes * scale) + words(7 * 729 * hidden_bytes * scale);
  };
  CHECK(encoder_first.input_bytes(mb) == 0);
  CHECK(encoder_first.output_bytes(mb) == encoder_rows(768.0 * 2));
  CHECK(encoder_last.input_bytes(mb) == encoder_rows(768.0 * 2));
  CHECK(encoder_last.output_bytes(mb) == encoder_rows(2048.0 * 2));  // projected to the LLM's width
  CHECK(llm_first.input_bytes(mb) == encoder_rows(2048.0 * 2));
  const std::size_t llm_rows = words(1000 * 2048.0 * 2 / 2 * scale) + words(300 * 2048.0 * 2 / 2 * scale) +
                               words(5000 * 2048.0 * 2 / 2 * scale);  // split over 2 TP ranks
  CHECK(llm_first.output_bytes(mb) == llm_rows);
  CHECK(llm_last.input_bytes(mb) == llm_rows);
  CHECK(llm_last.output_bytes(mb) == 0);
  // Bytes follow the element size (e.g. fp32 activations move twice bf16's).
  const emulated_stage fp32_first(assignment_of(layout, 0), model, {.byte_scale = scale, .element_bytes = 4});
  CHECK(fp32_first.output_bytes(mb) == encoder_rows(768.0 * 4));
  CHECK_THROWS_AS(emulated_stage(assignment_of(layout, 0), model, {.time_scale = -1}), input_error);
  CHECK_THROWS_AS(emulated_stage(assignment_of(layout, 0), model, {.element_bytes = 0}), input_error);
}
