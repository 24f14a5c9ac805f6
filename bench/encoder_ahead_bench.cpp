// SPDX-License-Identifier: Apache-2.0
//! \file
//! What letting the encoder run ahead would buy (issue #16, encoder/LLM
//! coupling). Under 1F1B a position keeps `S - 1 - p` forwards in flight before
//! its first backward; the encoder positions, first in the pipeline, could keep
//! more (their activations are small next to the LLM's) so that an LLM replica
//! never waits for an encoder part. This program plans a mixture under 1F1B,
//! then schedules every sampled batch of the plan with `extra` more warm-up
//! forwards on each encoder position (the rest of the schedule unchanged,
//! slots ordered by the same NEH search) and reports the mean predicted
//! iteration per `extra`, side by side with the plan's own schedule (extra 0).
//! Memory is not checked: an upper bound on the gain.
//!
//!     build/bench/encoder_ahead_bench                       # 64 and 256 GPUs, onevision
//!     build/bench/encoder_ahead_bench --gpus 64 --mixture video-heavy
//!
//! Prints one JSON document. A plain program: one run is one measurement.
#include <dflop/error.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim/order.hpp>
#include <dflop/workload/mixture.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

//! 1F1B over `positions`, with `extra` more warm-up forwards on the first
//! `encoder_positions` (at most all m). Still deadlock-free: each earlier
//! position keeps at least one more forward in flight than the next.
dflop::pipeline_schedule encoder_ahead(std::uint32_t positions, std::uint32_t encoder_positions, std::uint32_t m,
                                       std::uint32_t extra) {
  dflop::pipeline_schedule schedule = dflop::one_f_one_b{}.make({positions, m});
  for (std::uint32_t p = 0; p < encoder_positions; ++p) {
    const std::uint32_t warm = std::min(m, positions - 1 - p + extra);
    std::vector<dflop::pipeline_op> ops;
    for (std::uint32_t j = 0; j < warm; ++j) ops.push_back({dflop::op_kind::forward, j, p, 0});
    for (std::uint32_t j = warm; j < m; ++j) {
      ops.push_back({dflop::op_kind::forward, j, p, 0});
      ops.push_back({dflop::op_kind::backward, j - warm, p, 0});
    }
    for (std::uint32_t j = m - warm; j < m; ++j) ops.push_back({dflop::op_kind::backward, j, p, 0});
    schedule.rank_ops[p] = std::move(ops);
  }
  schedule.name = "1f1b, encoder +" + std::to_string(extra);
  dflop::validate(schedule);
  return schedule;
}

nlohmann::ordered_json measure(const std::string& mixture, int gpus) {
  const auto workload = dflop::generate_mixture(mixture, 10000, 0);
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const dflop::cluster_spec cluster{gpus, 8, dflop::find_gpu("h100-80gb")};
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
      model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), {}, {}, {},
      dflop::named_schedule("1f1b"));
  const dflop::plan plan = planner.make_plan(workload);
  const auto& config = plan.chosen.config;
  const std::uint32_t encoder_positions = config.has_encoder() ? static_cast<std::uint32_t>(config.encoder.pp) : 0;
  const dflop::batch_options options = plan.batch;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  dflop::multimodal_simulator simulator;
  double plain = 0;
  for (const std::uint32_t extra : {0U, 1U, 2U, 4U, 8U}) {
    double total = 0;
    for (const auto& batch : planner.sampled_batches()) {
      const auto scheduled = planner.schedule_batch(plan.chosen, batch, 0);
      const auto schedule = encoder_ahead(scheduled.costs.positions(), encoder_positions,
                                          scheduled.costs.microbatches, extra);
      total += dflop::order_slots(options.order, schedule, scheduled.costs, simulator, options.order_budget).makespan;
    }
    const double mean = total / static_cast<double>(planner.sampled_batches().size());
    if (extra == 0) plain = mean;
    rows.push_back({{"extra_warmup", extra}, {"iteration_seconds", mean}, {"gain", plain / mean - 1}});
  }
  return {{"mixture", mixture},
          {"gpus", gpus},
          {"config", (std::ostringstream{} << config).str()},
          {"planned_seconds", plan.chosen.iteration_seconds},
          {"runs", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What extra encoder warm-up forwards would buy under 1F1B (JSON out)"};
  std::vector<int> gpus{64, 256};
  std::vector<std::string> mixtures{"onevision"};
  app.add_option("--gpus", gpus, "cluster sizes to plan")->check(CLI::PositiveNumber);
  app.add_option("--mixture", mixtures, "built-in mixtures to plan");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& mixture : mixtures)
      for (const int count : gpus) {
        std::cerr << "planning " << mixture << " on " << count << " GPUs under 1F1B ...\n";
        out.push_back(measure(mixture, count));
      }
    std::cout << out.dump(2) << "\n";
  } catch (const dflop::error& e) {
    std::cerr << "encoder_ahead_bench: " << e.what() << "\n";
    return 2;
  }
}
