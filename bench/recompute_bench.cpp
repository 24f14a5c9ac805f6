// SPDX-License-Identifier: Apache-2.0
//! \file
//! What data-aware recomputation buys on batches the planner never saw. Each
//! case is planned once as `dflop plan` plans (schedule searched), then the same
//! fresh global batches are scheduled with the chosen plan three ways, side by
//! side: every batch at the plan's recompute count (`recompute_per_batch` off),
//! one count per stage replica and batch (`recompute_per_microbatch` off), and
//! a count per microbatch (the default). Reported per case: the mean predicted
//! iteration of each way and their ratios, and the median `schedule_batch`
//! time of each way (the order of the three rotates from batch to batch).
//!
//!     build/bench/recompute_bench                       # four cases, 16 batches each
//!     build/bench/recompute_bench --batches 64 --case 32b-64
//!
//! Prints one JSON document; progress goes to stderr. A plain program: one run
//! is one side-by-side measurement.
#include <dflop/error.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using searched_pipeline =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, dflop::named_schedule>;

//! A planning case: a mixture on a model and a cluster of H100s (8 per node).
struct bench_case {
  std::string name;
  std::string mixture;
  std::string model;
  int gpus;
  int global_batch;
};

const std::vector<bench_case> cases{
    {"video-heavy-7b-64", "video-heavy", "siglip-400m+qwen2.5-7b", 64, 512},
    {"32b-64", "onevision", "internvit-6b+qwen2.5-32b", 64, 512},
    {"70b-64", "onevision", "siglip-400m+llama3-70b", 64, 512},
    {"72b-256", "onevision", "internvit-6b+qwen2.5-72b", 256, 2048},
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

nlohmann::ordered_json measure(const bench_case& c, std::size_t batches, std::uint64_t seed) {
  const auto workload = dflop::generate_mixture(c.mixture, 10000, 0);
  const auto model = dflop::find_model(c.model);
  const dflop::cluster_spec cluster{c.gpus, 8, dflop::find_gpu("h100-80gb")};
  dflop::planner_options options;
  options.global_batch = c.global_batch;
  std::cerr << c.name << ": planning\n";
  const dflop::plan chosen =
      searched_pipeline::make_plan(workload, model, cluster, options, {.schedule = dflop::named_schedule("auto")});
  // The three ways, as plans that differ only in their batch options.
  std::array<dflop::plan, 3> ways{chosen, chosen, chosen};
  ways[0].batch.recompute_per_batch = false;
  ways[1].batch.recompute_per_microbatch = false;
  const std::array<const char*, 3> names{"plan_count", "per_stage", "per_microbatch"};
  const dflop::flops_cost_model cost(model, cluster.gpu);
  const dflop::analytic_memory_model memory(model);
  const searched_pipeline::policies with{.schedule = dflop::named_schedule(chosen.schedule)};

  std::array<double, 3> total{};
  std::array<std::vector<double>, 3> ms;
  dflop::batch_sampler sampler(workload.size(), static_cast<std::size_t>(chosen.global_batch),
                               dflop::batch_mode::epochs, seed);
  for (std::size_t b = 0; b < batches; ++b) {
    const auto batch = dflop::gather_samples(workload, sampler.next());
    for (std::size_t k = 0; k < 3; ++k) {
      const std::size_t way = (b + k) % 3;  // rotate, so drift on a shared machine hits all three
      const auto start = std::chrono::steady_clock::now();
      const auto result = searched_pipeline::schedule_batch(ways[way], batch, cost, memory, seed + b,
                                                            dflop::plan_method::dflop, with);
      ms[way].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      total[way] += result.predicted_seconds;
    }
    std::cerr << "\r" << c.name << ": " << (b + 1) << "/" << batches << std::flush;
  }
  std::cerr << "\n";
  std::ostringstream config;
  config << chosen.chosen.config;
  nlohmann::ordered_json row{{"case", c.name},
                             {"mixture", c.mixture},
                             {"model", c.model},
                             {"gpus", c.gpus},
                             {"schedule", chosen.schedule},
                             {"config", config.str()},
                             {"plan_iteration_seconds", chosen.chosen.iteration_seconds},
                             {"batches", batches}};
  for (std::size_t way = 0; way < 3; ++way) {
    row[std::string("mean_predicted_seconds_") + names[way]] = total[way] / static_cast<double>(batches);
    row[std::string("median_schedule_ms_") + names[way]] = median(ms[way]);
  }
  row["gain_per_stage"] = total[0] / total[1];
  row["gain_per_microbatch"] = total[0] / total[2];
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"recompute_bench: what data-aware recomputation buys on fresh batches (JSON)"};
  std::vector<std::string> wanted;
  std::size_t batches = 16;
  std::uint64_t seed = 7;
  app.add_option("--case", wanted, "cases to measure (default: all): video-heavy-7b-64, 32b-64, 70b-64, 72b-256");
  app.add_option("--batches", batches, "fresh global batches per case")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "sampling seed of the batches");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json out;
    out["benchmark"] = "recompute";
    out["cases"] = nlohmann::ordered_json::array();
    for (const auto& c : cases) {
      if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), c.name) == wanted.end()) continue;
      out["cases"].push_back(measure(c, batches, seed));
    }
    if (out["cases"].empty()) throw dflop::input_error("--case", 0, "names no case (see --help)");
    std::cout << out.dump(2) << '\n';
  } catch (const dflop::error& e) {
    std::cerr << "recompute_bench: " << e.what() << '\n';
    return 2;
  }
}
