// SPDX-License-Identifier: Apache-2.0
//! `dflop generate`: writes a synthetic workload (a built-in mixture) as a JSON Lines trace.
#include "command.hpp"

#include <dflop/error.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/trace.hpp>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

namespace {

//! What the user asked `generate` for.
struct generate_options {
  std::string mixture{dflop::default_mixture_name};
  std::size_t samples = dflop::default_workload_samples;
  std::uint64_t seed = dflop::default_workload_seed;
  std::string output;  // empty: standard output
};

void run_generate(const generate_options& options) {
  if (options.samples == 0) throw dflop::input_error("--samples", 0, "must be at least 1");
  const auto samples = dflop::generate_mixture(options.mixture, options.samples, options.seed);
  if (options.output.empty()) {
    dflop::write_trace(std::cout, samples);
    std::cout.flush();
    if (!std::cout) throw dflop::error("writing to standard output failed");
  } else {
    dflop::write_trace_file(options.output, samples);
    std::cerr << "dflop: wrote " << samples.size() << " samples of mixture '" << options.mixture << "' (seed "
              << options.seed << ") to " << options.output << "\n";
  }
}

void install_generate_command(CLI::App& app) {
  auto options = std::make_shared<generate_options>();
  std::string known;
  for (std::string_view name : dflop::mixture_preset_names) known.append(known.empty() ? "" : ", ").append(name);
  auto* command = app.add_subcommand("generate", "Write a synthetic workload as JSON Lines (one sample per line)");
  command->add_option("--mixture", options->mixture, "Built-in mixture: " + known)->capture_default_str();
  command->add_option("--samples", options->samples, "Number of samples (at least 1)")->capture_default_str();
  command->add_option("--seed", options->seed, "Random seed: the same seed gives the same trace")
      ->capture_default_str();
  command->add_option("--output", options->output, "Write to this file instead of standard output");
  command->callback([options] { run_generate(*options); });
}

}  // namespace

DFLOP_REGISTER_COMMAND("generate", install_generate_command);
