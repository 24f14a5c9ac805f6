// SPDX-License-Identifier: Apache-2.0
//! \file
//! What the encoder run-ahead buys (issue #16, encoder/LLM coupling): under
//! 1F1B and ZB-H1 an encoder stage runs its next forward only once a backward
//! has come back from the LLM, so an LLM replica can wait for its next part.
//! The planner lets the winner's encoder stages run 2, 8, 32, ... forwards
//! further ahead where that is faster and fits (`planner_options::
//! encoder_run_ahead`, `parallel_config::encoder_run_ahead`). This program plans
//! each setting twice, without and with that search, side by side, and reports
//! both plans' predicted iterations (simulated: the machine's load does not
//! move them), the run-ahead kept, and both planning times.
//!
//!     build/bench/encoder_ahead_bench                       # 64 and 256 GPUs, onevision
//!     build/bench/encoder_ahead_bench --gpus 16 64 --model internvit-6b+qwen2.5-32b
//!     build/bench/encoder_ahead_bench --gpus 64 --mixture video-heavy text-heavy
//!
//! Prints one JSON document. A plain program: one run is one measurement.
#include <dflop/error.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/workload/mixture.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

nlohmann::ordered_json plan_once(const std::vector<dflop::sample>& workload, const dflop::multimodal_spec& model,
                                 const dflop::cluster_spec& cluster, int global_batch, bool run_ahead) {
  dflop::planner_options settings;
  settings.global_batch = global_batch;
  settings.encoder_run_ahead = run_ahead;
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
      model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), settings, {}, {},
      dflop::named_schedule(std::string(dflop::named_schedule::automatic)));
  const auto started = std::chrono::steady_clock::now();
  const dflop::plan plan = planner.make_plan(workload);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return {{"config", (std::ostringstream{} << plan.chosen.config).str()},
          {"schedule", plan.schedule},
          {"encoder_run_ahead", plan.chosen.config.encoder_run_ahead},
          {"iteration_seconds", plan.chosen.iteration_seconds},
          {"efficiency", plan.efficiency()},
          {"planning_seconds", seconds}};
}

nlohmann::ordered_json measure(const std::string& model_name, const std::string& mixture, int gpus, int per_gpu) {
  const auto workload = dflop::generate_mixture(mixture, 10000, 0);
  const auto model = dflop::find_model(model_name);
  const dflop::cluster_spec cluster{gpus, 8, dflop::find_gpu("h100-80gb")};
  const auto without = plan_once(workload, model, cluster, gpus * per_gpu, false);
  const auto with = plan_once(workload, model, cluster, gpus * per_gpu, true);
  return {{"model", model_name},
          {"mixture", mixture},
          {"gpus", gpus},
          {"global_batch", gpus * per_gpu},
          {"without_run_ahead", without},
          {"with_run_ahead", with},
          {"gain", without["iteration_seconds"].get<double>() / with["iteration_seconds"].get<double>() - 1}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What the planner's encoder run-ahead buys: each setting planned without and with it (JSON out)"};
  std::vector<int> gpus{64, 256};
  std::vector<std::string> mixtures{"onevision"};
  std::string model = "siglip-400m+qwen2.5-7b";
  int per_gpu = 8;
  app.add_option("--gpus", gpus, "cluster sizes to plan")->check(CLI::PositiveNumber);
  app.add_option("--mixture", mixtures, "built-in mixtures to plan");
  app.add_option("--model", model, "ENCODER+LLM preset")->capture_default_str();
  app.add_option("--samples-per-gpu", per_gpu, "global batch = GPUs x this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& mixture : mixtures)
      for (const int count : gpus) {
        std::cerr << "planning " << model << ", " << mixture << " on " << count << " GPUs, without and with run-ahead ...\n";
        out.push_back(measure(model, mixture, count, per_gpu));
      }
    std::cout << out.dump(2) << "\n";
  } catch (const dflop::error& e) {
    std::cerr << "encoder_ahead_bench: " << e.what() << "\n";
    return 2;
  }
}
