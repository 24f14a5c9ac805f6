// SPDX-License-Identifier: Apache-2.0
//! \file
//! What the memory cap costs. For each built-in mixture the demo's model and
//! cluster are planned (with the cap, as the planner always plans), then the
//! same fresh global batches are scheduled twice with the chosen plan, side by
//! side: with the plan's memory budget and with none (`memory_budget_bytes` 0,
//! which may return microbatches that do not fit). Reported per mixture: the
//! mean predicted iteration with and without the cap and their ratio, how many
//! batches the cap changed or could not pack, the plan's own estimate, and the
//! median `schedule_batch` time of each side (calls alternated).
//!
//!     build/bench/memory_cap_bench                  # five mixtures, 64 batches each
//!     build/bench/memory_cap_bench --batches 256 --mixture video-heavy
//!
//! Prints one JSON document; progress goes to stderr. A plain program: one run
//! is one side-by-side measurement.
#include <dflop/error.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// One mixture: plan, then the same batches with and without the budget.
nlohmann::ordered_json measure(const std::string& mixture, std::size_t batches, std::uint64_t seed) {
  using default_pipeline = dflop::pipeline<>;
  const auto workload = dflop::generate_mixture(mixture, 10000, 0);
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const dflop::cluster_spec cluster{64, 8, dflop::find_gpu("h100-80gb")};
  const dflop::plan chosen = default_pipeline::make_plan(workload, model, cluster);
  dflop::plan uncapped = chosen;
  uncapped.batch.memory_budget_bytes = 0;

  double capped_total = 0, uncapped_total = 0;
  std::size_t scheduled = 0, changed = 0, infeasible = 0;
  std::vector<double> capped_ms, uncapped_ms;
  dflop::batch_sampler sampler(workload.size(), static_cast<std::size_t>(chosen.global_batch),
                               dflop::batch_mode::epochs, seed);
  for (std::size_t b = 0; b < batches; ++b) {
    const auto batch = dflop::gather_samples(workload, sampler.next());
    const auto timed = [&](const dflop::plan& p, std::vector<double>& times) {
      const auto start = std::chrono::steady_clock::now();
      auto result = default_pipeline::schedule_batch(p, batch, seed + b);
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      return result;
    };
    // Alternate which side goes first, so drift on a shared machine hits both.
    const bool capped_first = b % 2 == 0;
    dflop::batch_schedule free_run;
    if (!capped_first) free_run = timed(uncapped, uncapped_ms);
    try {
      const dflop::batch_schedule capped = timed(chosen, capped_ms);
      if (capped_first) free_run = timed(uncapped, uncapped_ms);
      capped_total += capped.predicted_seconds;
      uncapped_total += free_run.predicted_seconds;
      changed += capped.memory_capped ? 1 : 0;
      ++scheduled;
    } catch (const dflop::memory_cap_error&) {
      ++infeasible;
      if (capped_first) (void)timed(uncapped, uncapped_ms);
    }
    std::cerr << "\r" << mixture << ": " << (b + 1) << "/" << batches << std::flush;
  }
  std::cerr << "\n";
  const double capped_mean = scheduled > 0 ? capped_total / static_cast<double>(scheduled) : 0;
  const double uncapped_mean = scheduled > 0 ? uncapped_total / static_cast<double>(scheduled) : 0;
  std::ostringstream config;
  config << chosen.chosen.config;
  return {{"mixture", mixture},
          {"config", config.str()},
          {"memory_budget_gib", static_cast<double>(chosen.batch.memory_budget_bytes) / (1 << 30)},
          {"plan_iteration_seconds", chosen.chosen.iteration_seconds},
          {"plan_estimate", {{"batches", chosen.memory_cap.batches},
                             {"capped", chosen.memory_cap.capped},
                             {"infeasible", chosen.memory_cap.infeasible}}},
          {"batches", batches},
          {"capped_batches", changed},
          {"infeasible_batches", infeasible},
          {"mean_predicted_seconds_capped", capped_mean},
          {"mean_predicted_seconds_uncapped", uncapped_mean},
          {"cap_cost", uncapped_mean > 0 ? capped_mean / uncapped_mean - 1 : 0},
          {"median_schedule_ms_capped", median(capped_ms)},
          {"median_schedule_ms_uncapped", median(uncapped_ms)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memory_cap_bench: what the memory cap costs, per built-in mixture (JSON)"};
  std::vector<std::string> mixtures(dflop::mixture_preset_names.begin(), dflop::mixture_preset_names.end());
  std::size_t batches = 64;
  std::uint64_t seed = 7;
  app.add_option("--mixture", mixtures, "mixtures to measure (default: all five)");
  app.add_option("--batches", batches, "fresh global batches per mixture")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "sampling seed of the batches");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json out;
    out["benchmark"] = "memory_cap";
    out["mixtures"] = nlohmann::ordered_json::array();
    double worst = 0;
    for (const auto& mixture : mixtures) {
      auto row = measure(mixture, batches, seed);
      worst = std::max(worst, row["cap_cost"].get<double>());
      out["mixtures"].push_back(std::move(row));
    }
    out["worst_cap_cost"] = worst;
    std::cout << out.dump(2) << '\n';
  } catch (const dflop::error& e) {
    std::cerr << "memory_cap_bench: " << e.what() << '\n';
    return 2;
  }
}
