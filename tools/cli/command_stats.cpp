// SPDX-License-Identifier: Apache-2.0
//! `dflop stats`: what a workload looks like: samples per modality, the spread of
//! each size field and a histogram of LLM sequence lengths, as a table or JSON.
#include "command.hpp"

#include <dflop/error.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/statistics.hpp>
#include <dflop/workload/trace.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

//! What the user asked `stats` for.
struct stats_options {
  std::string workload;  // empty: the built-in default mixture
  bool json = false;
};

//! One line naming where the samples came from.
std::string describe_source(const stats_options& options) {
  std::ostringstream text;
  if (options.workload.empty())
    text << "built-in mixture '" << dflop::default_mixture_name << "' (" << dflop::default_workload_samples
         << " samples, seed " << dflop::default_workload_seed << "); pass --workload FILE.jsonl for a trace";
  else
    text << "trace " << options.workload;
  return text.str();
}

nlohmann::ordered_json histogram_json(const std::vector<dflop::histogram_bin>& bins) {
  auto result = nlohmann::ordered_json::array();
  for (const auto& bin : bins) result.push_back({{"low", bin.low}, {"high", bin.high}, {"count", bin.count}});
  return result;
}

void print_json(const stats_options& options, const std::vector<dflop::sample>& samples,
                const dflop::workload_statistics& statistics) {
  nlohmann::ordered_json report;
  if (options.workload.empty())
    report["workload"] = {{"source", "built-in"},
                          {"mixture", dflop::default_mixture_name},
                          {"samples", dflop::default_workload_samples},
                          {"seed", dflop::default_workload_seed}};
  else
    report["workload"] = {{"source", "file"}, {"path", options.workload}};
  report["samples"] = statistics.sample_count;
  // Parts are built apart and then added: an ordered_json keeps its members in a
  // vector, so a reference to one dangles once the next key is added.
  auto modalities = nlohmann::ordered_json::object();
  for (dflop::modality kind : dflop::all_modalities)
    modalities[std::string(dflop::to_string(kind))] = {{"count", statistics.count(kind)},
                                                       {"share", statistics.share(kind)}};
  report["modalities"] = std::move(modalities);
  report["quantiles"] = "nearest-rank";
  auto fields = nlohmann::ordered_json::object();
  auto histograms = nlohmann::ordered_json::object();
  for (dflop::sample_field field : dflop::all_sample_fields) {
    const auto& summary = statistics.summary(field);
    const std::string name(dflop::to_string(field));
    fields[name] = {{"min", summary.min}, {"mean", summary.mean}, {"p50", summary.p50},
                    {"p90", summary.p90}, {"p99", summary.p99},   {"max", summary.max}};
    histograms[name] = histogram_json(dflop::log2_histogram(dflop::field_values(samples, field)));
  }
  report["fields"] = std::move(fields);
  report["histograms_log2"] = std::move(histograms);
  std::cout << report.dump(2) << "\n";
}

void print_table(const stats_options& options, const std::vector<dflop::sample>& samples,
                 const dflop::workload_statistics& statistics) {
  std::ostream& out = std::cout;
  out << "workload: " << describe_source(options) << "\n";
  out << "samples:  " << statistics.sample_count << "\n\n";
  out << std::left << std::setw(14) << "modality" << std::right << std::setw(10) << "count" << std::setw(9) << "share"
      << "\n";
  for (dflop::modality kind : dflop::all_modalities)
    out << std::left << std::setw(14) << dflop::to_string(kind) << std::right << std::setw(10) << statistics.count(kind)
        << std::setw(8) << std::fixed << std::setprecision(1) << 100.0 * statistics.share(kind) << "%\n";

  out << "\n" << std::left << std::setw(16) << "field" << std::right;
  for (const char* column : {"min", "mean", "p50", "p90", "p99", "max"}) out << std::setw(11) << column;
  out << "\n";
  for (dflop::sample_field field : dflop::all_sample_fields) {
    const auto& summary = statistics.summary(field);
    out << std::left << std::setw(16) << dflop::to_string(field) << std::right << std::setw(11) << summary.min
        << std::setw(11) << std::fixed << std::setprecision(1) << summary.mean << std::setw(11) << summary.p50
        << std::setw(11) << summary.p90 << std::setw(11) << summary.p99 << std::setw(11) << summary.max << "\n";
  }
  out << "(quantiles by nearest rank: the smallest value with at least q of the samples at or below it)\n";

  const auto bins = dflop::log2_histogram(dflop::field_values(samples, dflop::sample_field::llm_tokens));
  std::size_t largest = 0;
  for (const auto& bin : bins) largest = std::max(largest, bin.count);
  out << "\nllm_tokens histogram (power-of-two bins):\n";
  bool started = false;
  for (const auto& bin : bins) {
    started = started || bin.count > 0;
    if (!started) continue;
    const auto bar = largest == 0 ? std::size_t{0} : (bin.count * 40 + largest - 1) / largest;
    out << "  [" << std::setw(7) << bin.low << ", " << std::setw(7) << bin.high << ")" << std::setw(9) << bin.count
        << "  " << std::string(bar, '#') << "\n";
  }
}

void run_stats(const stats_options& options) {
  const std::vector<dflop::sample> samples =
      options.workload.empty() ? dflop::default_workload() : dflop::read_trace_file(options.workload);
  if (samples.empty()) throw dflop::input_error(options.workload, 0, "the trace holds no samples");
  const auto statistics = dflop::describe_workload(samples);
  if (options.json)
    print_json(options, samples, statistics);
  else
    print_table(options, samples, statistics);
}

void install_stats_command(CLI::App& app) {
  auto options = std::make_shared<stats_options>();
  auto* command = app.add_subcommand(
      "stats", "Show samples per modality and the spread of each size field of a workload");
  command->add_option("--workload", options->workload,
                      "JSON Lines trace to describe (default: the built-in 'onevision' mixture, 10000 samples, seed 0)");
  command->add_flag("--json", options->json, "Print one JSON object instead of a table");
  command->callback([options] { run_stats(*options); });
}

}  // namespace

DFLOP_REGISTER_COMMAND("stats", install_stats_command);
