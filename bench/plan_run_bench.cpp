// SPDX-License-Identifier: Apache-2.0
//! \file
//! Runs a plan's three methods (dflop, data_blind, dflop_reference) through the
//! same `plan_runner` over emulated devices, ranks as threads, and compares the
//! measured iteration times with the simulator's predictions and with each
//! other. The methods are interleaved step by step (step k of every method, then
//! step k + 1; the first method rotates each step), so the machine's noise hits
//! all three alike and the measured speedups can be set against the predicted ones.
//!
//!     build/bench/plan_run_bench                      # the three built-in cases
//!     build/bench/plan_run_bench --plan p.json --steps 9 --time-scale 0.2
//!
//! Prints one JSON document (or, with `--table`, the Markdown table of
//! docs/benchmarks.md); progress goes to stderr. Not a Google Benchmark: one
//! run is one measurement of every method, side by side.
#include <dflop/error.hpp>
#include <dflop/exec/emulated_stage.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/model/gpu_spec.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/trace.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

//! Saved plans name their schedule, so the pipeline takes it as a value.
using bench_pipeline =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, dflop::named_schedule>;
using bench_runner = bench_pipeline::runner<dflop::inproc_communicator, dflop::emulated_stage>;

//! dflop first: the speedups are dflop's over the others.
constexpr auto methods = dflop::all_plan_methods;

//! A workload planned in-process (when no `--plan` is given).
struct builtin_case {
  const char* model;
  int gpus;
  int global_batch;
};
//! The default model on 16 and 32 GPUs, and a 32B LLM that needs tensor and pipeline parallelism on 16.
constexpr std::array<builtin_case, 3> builtin_cases = {{
    {"siglip-400m+qwen2.5-7b", 16, 128},
    {"siglip-400m+qwen2.5-7b", 32, 256},
    {"siglip-400m+qwen2.5-32b", 16, 64},
}};
constexpr int builtin_gpus_per_node = 8;
constexpr const char* builtin_gpu = "h100-80gb";
constexpr int builtin_planner_batches = 2;
//! Below this a scaled op is mostly sleep overshoot and thread wake-up latency.
constexpr double shortest_trusted_op_seconds = 2e-3;

struct bench_options {
  std::vector<std::string> plan_paths;  // empty: the built-in cases
  std::string workload;                 // empty: the built-in default workload
  int steps = 5;
  //! 0.1: the built-in cases' median ops sleep 7-30 ms, well above sleep precision,
  //! and 16-32 threads on 2 cores add ~1% of wake-up latency (~4-8% at 0.05).
  double time_scale = 0.1;
  double byte_scale = dflop::emulation_options{}.byte_scale;
  bool table = false;
};

//! One plan to run, with where it came from.
struct bench_case {
  dflop::plan chosen;
  std::string source;  // "planned" or the file's path
  double planning_seconds = 0;
};

//! One method's batches, schedules and measurements in one case.
struct method_run {
  std::string method;
  std::vector<dflop::batch_schedule> scheduled;  // step k's schedule
  std::vector<double> measured;                  // step k: slowest rank's step wall time (scaled seconds)
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double mean_of_first(const std::vector<double>& values, std::size_t count) {
  count = std::min(count, values.size());
  double sum = 0;
  for (std::size_t k = 0; k < count; ++k) sum += values[k];
  return count ? sum / static_cast<double>(count) : 0.0;
}

//! The 1-minute load average (Linux), to say how busy the machine was; null where unknown.
nlohmann::json load_average() {
  std::ifstream file("/proc/loadavg");
  double value = 0;
  if (file >> value) return value;
  return nullptr;
}

//! Every op's model time in a method's batches (F, B and W where priced): how long ops sleep, unscaled.
double median_op_seconds(const method_run& run) {
  std::vector<double> ops;
  for (const auto& batch : run.scheduled)
    for (const dflop::module_costs* costs : {&batch.costs.encoder, &batch.costs.llm})
      for (const std::vector<double>* values : {&costs->forward, &costs->backward, &costs->weight})
        for (double v : *values)
          if (v > 0) ops.push_back(v);
  return median(std::move(ops));
}

std::string config_text(const dflop::parallel_config& config) {
  std::ostringstream text;
  text << config;
  return text.str();
}

bench_case plan_builtin(const builtin_case& spec, std::span<const dflop::sample> workload) {
  const auto model = dflop::find_model(spec.model);
  const dflop::cluster_spec cluster{spec.gpus, builtin_gpus_per_node, dflop::find_gpu(builtin_gpu)};
  dflop::planner_options options;
  options.global_batch = spec.global_batch;
  options.batches = builtin_planner_batches;
  const auto start = std::chrono::steady_clock::now();
  bench_case out{bench_pipeline::make_plan(workload, model, cluster, options), "planned", 0};
  out.planning_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

//! Draws `steps` global batches as `dflop schedule` and the planner do: one
//! sampler with the plan's seed (batch k is then packed with seed + k), so the
//! first `plan.batches` are the ones the planner scored.
std::vector<std::vector<dflop::sample>> draw_batches(const dflop::plan& chosen, std::span<const dflop::sample> pool,
                                                     int steps) {
  dflop::batch_sampler sampler(pool.size(), static_cast<std::size_t>(chosen.global_batch),
                               dflop::batch_mode::without_replacement, chosen.seed);
  std::vector<std::vector<dflop::sample>> batches;
  for (int k = 0; k < steps; ++k) batches.push_back(dflop::gather_samples(pool, sampler.next()));
  return batches;
}

//! Runs every method of `item` for `options.steps` steps, interleaved, on one
//! in-process world of the plan's GPU count; returns the methods' measurements.
std::vector<method_run> run_case(const bench_case& item, std::span<const dflop::sample> pool,
                                 const bench_options& options, const std::string& label) {
  const dflop::plan& chosen = item.chosen;
  const bench_pipeline::policies with{.schedule = dflop::named_schedule(chosen.schedule)};
  const auto batches = draw_batches(chosen, pool, options.steps);
  std::vector<method_run> runs;
  for (const dflop::plan_method method : methods) {
    method_run run{std::string(dflop::name_of(method)), {}, {}};
    for (int k = 0; k < options.steps; ++k)
      run.scheduled.push_back(bench_pipeline::schedule_batch(
          chosen, batches[static_cast<std::size_t>(k)], chosen.seed + static_cast<std::uint64_t>(k), method, with));
    runs.push_back(std::move(run));
  }

  const int ranks = chosen.cluster.gpus;
  const std::size_t steps = static_cast<std::size_t>(options.steps);
  // seconds[(method * steps + step) * ranks + rank]: each rank writes only its own entries.
  std::vector<double> seconds(methods.size() * steps * static_cast<std::size_t>(ranks), 0.0);
  const dflop::emulation_options emulation{.time_scale = options.time_scale, .byte_scale = options.byte_scale};
  dflop::run_inproc(ranks, [&](dflop::inproc_communicator& comm) {
    // Every rank builds the three runners in the same order (each splits its groups off the world).
    std::vector<std::unique_ptr<bench_runner>> runners;
    for (const dflop::plan_method method : methods)
      runners.push_back(std::make_unique<bench_runner>(
          chosen, comm,
          [&](const dflop::stage_assignment& a) { return dflop::emulated_stage(a, chosen.model_spec, emulation); },
          dflop::executor_options{}, method, with.schedule));
    for (std::size_t k = 0; k < steps; ++k) {
      for (std::size_t i = 0; i < methods.size(); ++i) {
        const std::size_t j = (k + i) % methods.size();  // rotate which method goes first
        const auto& batch = runs[j].scheduled[k];
        runners[j]->stage().begin_step(batch);
        const dflop::step_result result = runners[j]->step(batch, batches[k]);
        seconds[(j * steps + k) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(comm.rank())] =
            result.seconds;
        if (comm.rank() != 0) continue;
        // The emulated loss is the sum of (sample index + 1): N (N + 1) / 2 when every sample ran once.
        const double n = static_cast<double>(batches[k].size());
        if (result.loss != n * (n + 1) / 2)
          throw dflop::error("plan_run_bench: " + runs[j].method + " step " + std::to_string(k) +
                             " lost samples (loss " + std::to_string(result.loss) + ", expected " +
                             std::to_string(n * (n + 1) / 2) + ")");
        std::cerr << label << " step " << k + 1 << "/" << steps << "  " << std::left << std::setw(16) << runs[j].method
                  << std::right << std::fixed << std::setprecision(1) << " measured " << result.seconds * 1e3
                  << " ms, predicted " << batch.predicted_seconds * options.time_scale * 1e3 << " ms\n";
        std::cerr.unsetf(std::ios::floatfield);
      }
    }
  });
  // A step's time: the slowest rank's (the ranks end together at the loss all-reduce; they start a wake-up apart).
  for (std::size_t j = 0; j < methods.size(); ++j)
    for (std::size_t k = 0; k < steps; ++k) {
      const auto first =
          seconds.begin() + static_cast<std::ptrdiff_t>((j * steps + k) * static_cast<std::size_t>(ranks));
      runs[j].measured.push_back(*std::max_element(first, first + ranks));
    }
  return runs;
}

nlohmann::json method_json(const method_run& run, const dflop::plan& chosen, double time_scale) {
  std::vector<double> predicted;
  for (const auto& batch : run.scheduled) predicted.push_back(batch.predicted_seconds);
  const double raw = median(run.measured);
  const double model_seconds = raw / time_scale;
  const double predicted_seconds = median(predicted);
  const dflop::method_result& result = chosen.method(run.method);
  nlohmann::json steps = nlohmann::json::array();
  std::vector<double> step_ratios;  // each step against its own batch's prediction
  for (std::size_t k = 0; k < run.measured.size(); ++k) {
    if (predicted[k] > 0) step_ratios.push_back(run.measured[k] / time_scale / predicted[k]);
    steps.push_back({{"measured_raw_seconds", run.measured[k]},
                     {"measured_seconds", run.measured[k] / time_scale},
                     {"predicted_seconds", predicted[k]}});
  }
  return {{"method", run.method},
          {"config", config_text(result.config)},
          {"fits_memory", result.fits_memory},
          {"plan_iteration_seconds", result.iteration_seconds},
          // The first `plan.batches` steps are the batches the planner scored: their mean is the plan's figure.
          {"scored_batches_predicted_seconds", mean_of_first(predicted, static_cast<std::size_t>(chosen.batches))},
          {"median_measured_seconds", model_seconds},
          {"median_measured_raw_seconds", raw},
          {"median_predicted_seconds", predicted_seconds},
          {"measured_over_predicted", predicted_seconds > 0 ? model_seconds / predicted_seconds : 0.0},
          {"median_step_measured_over_predicted", median(step_ratios)},
          {"median_op_raw_seconds", median_op_seconds(run) * time_scale},
          {"steps", steps}};
}

nlohmann::json case_json(const bench_case& item, const std::vector<method_run>& runs, const bench_options& options) {
  const dflop::plan& chosen = item.chosen;
  nlohmann::json out{{"model", chosen.model},
                     {"gpus", chosen.cluster.gpus},
                     {"gpus_per_node", chosen.cluster.gpus_per_node},
                     {"gpu", chosen.cluster.gpu.name},
                     {"global_batch", chosen.global_batch},
                     {"schedule", chosen.schedule},
                     {"seed", chosen.seed},
                     {"time_scale", options.time_scale},
                     {"steps", options.steps},
                     {"source", item.source}};
  if (item.source == "planned") out["planning_seconds"] = item.planning_seconds;
  out["methods"] = nlohmann::json::array();
  for (const auto& run : runs) out["methods"].push_back(method_json(run, chosen, options.time_scale));
  const auto& dflop_run = out["methods"][0];
  out["speedups"] = nlohmann::json::array();
  for (std::size_t j = 1; j < runs.size(); ++j) {
    const auto& base = out["methods"][j];
    const double measured =
        base["median_measured_seconds"].get<double>() / dflop_run["median_measured_seconds"].get<double>();
    const double predicted =
        base["median_predicted_seconds"].get<double>() / dflop_run["median_predicted_seconds"].get<double>();
    // The same on each step's own batch (both methods ran it, one after the other): free of which batch is the median.
    std::vector<double> step_measured, step_predicted;
    for (std::size_t k = 0; k < runs[j].measured.size(); ++k) {
      step_measured.push_back(runs[j].measured[k] / runs[0].measured[k]);
      step_predicted.push_back(runs[j].scheduled[k].predicted_seconds / runs[0].scheduled[k].predicted_seconds);
    }
    out["speedups"].push_back({{"over", runs[j].method},
                               {"measured", measured},
                               {"predicted", predicted},
                               {"measured_over_predicted", measured / predicted},
                               {"median_step_measured", median(step_measured)},
                               {"median_step_predicted", median(step_predicted)}});
  }
  return out;
}

std::string fixed(double value, int digits) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(digits) << value;
  return text.str();
}

//! The docs' table: one row per (case, method).
void print_table(const nlohmann::json& document, std::ostream& out) {
  out << "| model | GPUs | batch | method | configuration | measured (model s) | raw | predicted | "
         "measured / predicted | per step | median op (raw) | dflop speedup, measured | predicted |\n"
         "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& item : document["cases"]) {
    bool first = true;
    for (const auto& method : item["methods"]) {
      std::string measured_speedup = "-", predicted_speedup = "-";
      for (const auto& speedup : item["speedups"])
        if (speedup["over"] == method["method"]) {
          // Of the medians, then (in parentheses) the median of each step's own ratio.
          measured_speedup = fixed(speedup["measured"].get<double>(), 2) + "x (" +
                             fixed(speedup["median_step_measured"].get<double>(), 2) + "x)";
          predicted_speedup = fixed(speedup["predicted"].get<double>(), 2) + "x (" +
                              fixed(speedup["median_step_predicted"].get<double>(), 2) + "x)";
        }
      const bool is_dflop = method["method"] == "dflop";
      const std::string name = method["method"].get<std::string>();
      out << "| " << (first ? item["model"].get<std::string>() : "") << " | "
          << (first ? std::to_string(item["gpus"].get<int>()) : "") << " | "
          << (first ? std::to_string(item["global_batch"].get<int>()) : "") << " | "
          << (is_dflop ? "**" + name + "**" : name) << " | " << method["config"].get<std::string>() << " | "
          << fixed(method["median_measured_seconds"].get<double>(), 3) << " s | "
          << fixed(method["median_measured_raw_seconds"].get<double>() * 1e3, 1) << " ms | "
          << fixed(method["median_predicted_seconds"].get<double>(), 3) << " s | "
          << fixed(method["measured_over_predicted"].get<double>(), 3) << " | "
          << fixed(method["median_step_measured_over_predicted"].get<double>(), 3) << " | "
          << fixed(method["median_op_raw_seconds"].get<double>() * 1e3, 1) << " ms | " << measured_speedup << " | "
          << predicted_speedup << " |\n";
      first = false;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench_options options;
  CLI::App app{
      "Runs a plan's three methods (dflop, data_blind, dflop_reference) over emulated devices, ranks as "
      "threads, interleaved step by step; prints measured and predicted iteration times and speedups as JSON"};
  app.add_option("--plan", options.plan_paths,
                 "plan file to run (repeatable; default: plan the three built-in cases in-process)");
  app.add_option("--workload", options.workload,
                 "JSONL trace batches are drawn from (default: the built-in onevision workload)");
  app.add_option("--steps", options.steps, "global batches run per method")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--time-scale", options.time_scale, "emulated seconds per model second")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--byte-scale", options.byte_scale, "activation bytes moved per model byte")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bool json_flag = false;  // JSON is the default; the flag says so explicitly
  auto* json = app.add_flag("--json", json_flag, "print the JSON document (the default)");
  app.add_flag("--table", options.table, "print the Markdown table of docs/benchmarks.md instead of JSON")
      ->excludes(json);
  CLI11_PARSE(app, argc, argv);

  try {
    const auto pool = options.workload.empty() ? dflop::default_workload() : dflop::read_trace_file(options.workload);
    std::vector<bench_case> cases;
    if (options.plan_paths.empty()) {
      for (const auto& spec : builtin_cases) {
        std::cerr << "planning " << spec.model << " on " << spec.gpus << " GPUs, global batch " << spec.global_batch
                  << "...\n";
        cases.push_back(plan_builtin(spec, pool));
      }
    } else {
      for (const auto& path : options.plan_paths) cases.push_back({dflop::read_plan(path), path, 0});
    }

    nlohmann::json document{{"benchmark", "plan_run_bench"},
                            {"steps", options.steps},
                            {"time_scale", options.time_scale},
                            {"byte_scale", options.byte_scale},
                            {"hardware_threads", std::thread::hardware_concurrency()},
                            {"load_average_before", load_average()},
                            {"cases", nlohmann::json::array()}};
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const auto& item = cases[c];
      const std::string label = "case " + std::to_string(c + 1) + "/" + std::to_string(cases.size());
      std::cerr << label << ": " << item.chosen.model << " on " << item.chosen.cluster.gpus << " GPUs, global batch "
                << item.chosen.global_batch << " (" << item.source << "), " << options.steps
                << " steps of each method\n";
      const auto runs = run_case(item, pool, options, label);
      for (const auto& run : runs)
        if (median_op_seconds(run) * options.time_scale < shortest_trusted_op_seconds)
          std::cerr << "warning: " << run.method << "'s median op sleeps "
                    << median_op_seconds(run) * options.time_scale * 1e3
                    << " ms: below ~2 ms sleep overshoot and wake-up latency inflate the measurement; raise "
                       "--time-scale\n";
      document["cases"].push_back(case_json(item, runs, options));
    }
    document["load_average_after"] = load_average();
    if (options.table) {
      print_table(document, std::cout);
    } else {
      std::cout << document.dump(2) << std::endl;
      print_table(document, std::cerr);  // the summary, beside the progress
    }
  } catch (const std::exception& failure) {
    std::cerr << "plan_run_bench: " << failure.what() << "\n";
    return 1;
  }
  return 0;
}
