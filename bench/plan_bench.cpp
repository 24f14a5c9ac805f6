// SPDX-License-Identifier: Apache-2.0
//! Planner benchmarks: planning time (64 and 1024 GPUs) and plan quality side by
//! side with the baselines, over the built-in mixtures, models and cluster
//! sizes. Each case plans once (planning is seconds, not microseconds); the
//! counters carry the simulated iteration times (s), dflop's speed-up over each
//! baseline and its efficiency (ideal / dflop).
//!
//! Reproduce: cmake --build build --target plan_bench && build/bench/plan_bench
//!   (a subset: --benchmark_filter=mixture, --benchmark_filter=scale)
#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/workload/mixture.hpp>

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace {

//! The mixtures benchmarked; 10000 samples each, seed 0.
const std::vector<std::string> mixtures{"onevision", "video-heavy", "text-heavy", "image-only", "omni"};

const std::vector<dflop::sample>& workload(const std::string& mixture) {
  static std::map<std::string, std::vector<dflop::sample>> cache;
  auto found = cache.find(mixture);
  if (found == cache.end()) found = cache.emplace(mixture, dflop::generate_mixture(mixture, 10000, 0)).first;
  return found->second;
}

//! How a recomputing module chooses its recomputed layers, for side-by-side figures.
enum class recompute_rule {
  per_batch,     //!< as planned by default: the plan's fewest count, lowered per batch where its peaks allow
  planned_count, //!< the plan's fewest count for every batch (`batch_options::recompute_per_batch` off)
  whole_stage,   //!< all of a stage's layers, as before partial recomputation
};

//! Plans once and reports the comparison as counters.
void plan_case(benchmark::State& state, const std::string& mixture, const std::string& model_name, int gpus,
               int global_batch, recompute_rule rule) {
  const auto model = dflop::find_model(model_name);
  const dflop::cluster_spec cluster{gpus, 8, dflop::find_gpu("h100-80gb")};
  dflop::planner_options options;
  options.global_batch = global_batch;
  options.partial_recompute = rule != recompute_rule::whole_stage;
  options.batch.recompute_per_batch = rule == recompute_rule::per_batch;
  dflop::plan result;
  for (auto _ : state) {
    dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
        model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), options, {},
        {}, dflop::named_schedule("auto"));  // as `dflop plan` does: the schedule is searched
    try {
      result = planner.make_plan(workload(mixture));
    } catch (const dflop::infeasible_error& e) {
      state.SkipWithError(e.what());  // e.g. a 32B model on 16 GPUs without optimizer sharding
      return;
    }
  }
  state.counters["dflop_s"] = result.chosen.iteration_seconds;
  state.counters["ideal_s"] = result.ideal_seconds;
  state.counters["efficiency"] = result.efficiency();
  for (const auto& baseline : result.baselines) {
    state.counters[std::string(dflop::name_of(baseline.method)) + "_s"] = baseline.iteration_seconds;
    state.counters["speedup_vs_" + std::string(dflop::name_of(baseline.method))] = baseline.iteration_seconds / result.chosen.iteration_seconds;
  }
  state.counters["simulated"] = static_cast<double>(result.search.simulated);
  state.counters["scan_s"] = result.search.scoring_seconds - result.search.finalist_seconds;
  state.counters["finalists_s"] = result.search.finalist_seconds;
  state.counters["baselines_s"] = result.search.baseline_seconds;
  state.counters["candidates"] = static_cast<double>(result.search.candidates);
  // Each schedule's best finalist (ZB-H1 chosen: zb-h1_s is dflop_s).
  for (const auto& trial : result.search.schedules) state.counters[trial.schedule + "_s"] = trial.seconds;
  state.SetLabel("schedule " + result.schedule + ", encoder " + dflop::detail::format_degrees(result.chosen.config.encoder) +
                 ", llm " + dflop::detail::format_degrees(result.chosen.config.llm) + ", m" +
                 std::to_string(result.chosen.config.microbatches));
}

void register_cases() {
  // Each case three times: as planned; with the plan's recompute count for
  // every batch (suffix "/planned-count"); and with recomputation of all of a
  // stage's layers or none, as before partial recomputation ("/whole-stage-recompute").
  for (const recompute_rule partial : {recompute_rule::per_batch, recompute_rule::planned_count, recompute_rule::whole_stage}) {
    const std::string suffix = partial == recompute_rule::per_batch       ? ""
                               : partial == recompute_rule::planned_count ? "/planned-count"
                                                                          : "/whole-stage-recompute";
    // Every built-in mixture on the demo setting.
    for (const auto& mixture : mixtures)
      benchmark::RegisterBenchmark(("mixture/" + mixture + suffix).c_str(), [mixture, partial](benchmark::State& state) {
        plan_case(state, mixture, "siglip-400m+qwen2.5-7b", 64, 512, partial);
      })->Iterations(1)->Unit(benchmark::kSecond);
    // Models x cluster sizes (8 samples per GPU of global batch).
    for (const std::string model : {"siglip-400m+qwen2.5-7b", "internvit-6b+qwen2.5-32b", "siglip-400m+llama3-70b",
                                    "internvit-6b+qwen2.5-72b"})
      for (int gpus : {16, 64, 256, 1024}) {
        if (gpus == 16 && model.find("7") != std::string::npos && model.find("7b") == std::string::npos) continue;
        benchmark::RegisterBenchmark(("scale/" + model + "/gpus:" + std::to_string(gpus) + suffix).c_str(),
                                     [model, gpus, partial](benchmark::State& state) {
                                       plan_case(state, "onevision", model, gpus, 8 * gpus, partial);
                                     })
            ->Iterations(1)
            ->Unit(benchmark::kSecond);
      }
  }
}

const bool registered = (register_cases(), true);

}  // namespace
