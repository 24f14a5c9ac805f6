// SPDX-License-Identifier: Apache-2.0
//! `dflop pack`: splits the samples of a costs CSV into K balanced microbatches.
#include "command.hpp"

#include <dflop/error.hpp>
#include <dflop/plan/pack.hpp>
#include <dflop/util/csv.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct pack_command_options {
  std::string costs;
  std::size_t bins = 0;
  std::string packer = "refined";
  std::uint64_t seed = 0;
  bool json = false;
};

//! The samples of a costs CSV: ids and the cost matrix (id column first, one column per dimension).
struct costs_file {
  std::vector<std::string> ids;
  dflop::cost_matrix costs;
};

costs_file read_costs(const std::string& path, std::size_t bins) {
  const dflop::csv_table table = dflop::read_csv_file(path);
  if (table.columns.empty() || table.columns.front() != "id")
    throw dflop::input_error(path, 1, "missing column 'id': the first column must be 'id'");
  if (table.columns.size() < 2) throw dflop::input_error(path, 1, "no cost columns after 'id'");
  const std::size_t dimensions = table.columns.size() - 1;
  costs_file file;
  std::vector<double> values;
  values.reserve(table.rows.size() * dimensions);
  std::unordered_map<std::string, std::size_t> first_line;
  for (const auto& row : table.rows) {
    const std::string& id = row.fields.front();
    if (id.empty()) throw dflop::input_error(path, row.line, "empty id");
    if (const auto [at, fresh] = first_line.emplace(id, row.line); !fresh)
      throw dflop::input_error(path, row.line,
                               "duplicate id '" + id + "' (first on line " + std::to_string(at->second) + ")");
    file.ids.push_back(id);
    for (std::size_t column = 1; column < table.columns.size(); ++column) values.push_back(table.number(row, column));
  }
  if (file.ids.size() < bins)
    throw dflop::input_error(path, 0,
                             std::to_string(file.ids.size()) + " samples cannot fill " + std::to_string(bins) +
                                 " bins without leaving one empty (need N >= K)");
  file.costs = dflop::cost_matrix(file.ids.size(), dimensions, std::move(values));
  return file;
}

//! Runs the packer named `name`; returns the packing and the seconds it took.
std::pair<dflop::packing, double> run_packer(const std::string& name, const dflop::cost_matrix& costs, std::size_t bins,
                                             std::uint64_t seed) {
  dflop::pack_workspace workspace;
  dflop::packing result;
  const dflop::pack_options options{.seed = seed};
  const auto start = std::chrono::steady_clock::now();
  if (name == dflop::sequential_packer::name()) dflop::sequential_packer{}.pack(costs, bins, options, workspace, result);
  else if (name == dflop::lpt_packer::name()) dflop::lpt_packer{}.pack(costs, bins, options, workspace, result);
  else if (name == dflop::karmarkar_karp_packer::name()) dflop::karmarkar_karp_packer{}.pack(costs, bins, options, workspace, result);
  else if (name == dflop::exact_packer::name()) dflop::exact_packer{}.pack(costs, bins, options, workspace, result);
  else dflop::refined_packer{}.pack(costs, bins, options, workspace, result);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {std::move(result), seconds};
}

void run_pack(const pack_command_options& options) {
  if (options.bins == 0) throw dflop::input_error("--bins", 0, "the number of bins must be at least 1");
  const costs_file file = read_costs(options.costs, options.bins);
  const auto [result, seconds] = run_packer(options.packer, file.costs, options.bins, options.seed);
  if (options.json) {
    nlohmann::json bins = nlohmann::json::array();
    for (std::size_t k = 0; k < result.bin_count(); ++k) {
      nlohmann::json ids = nlohmann::json::array();
      for (std::size_t sample : result.bin(k)) ids.push_back(file.ids[sample]);
      bins.push_back(std::move(ids));
    }
    const nlohmann::json out{{"packer", options.packer},
                             {"bins", std::move(bins)},
                             {"makespan", result.makespan},
                             {"lower_bound", result.lower_bound},
                             {"seconds", seconds}};
    std::cout << out.dump() << '\n';
    return;
  }
  std::cout << "packer       " << options.packer << '\n'
            << "samples      " << file.ids.size() << " (" << file.costs.dimensions() << " cost dimensions)\n"
            << "bins         " << result.bin_count() << '\n'
            << "makespan     " << result.makespan << '\n'
            << "lower bound  " << result.lower_bound << '\n'
            << "gap          " << result.gap * 100 << "%\n"
            << "seconds      " << seconds << "\n\n";
  for (std::size_t k = 0; k < result.bin_count(); ++k) {
    std::cout << "bin " << k << ':';
    for (std::size_t sample : result.bin(k)) std::cout << ' ' << file.ids[sample];
    std::cout << '\n';
  }
}

void install_pack_command(CLI::App& app) {
  auto options = std::make_shared<pack_command_options>();
  auto* command = app.add_subcommand("pack", "Split the samples of a costs CSV into K balanced microbatches (bins)");
  command->add_option("--costs", options->costs,
                      "CSV with a header: first column 'id', every other column one cost dimension (numbers >= 0)")
      ->required();
  command->add_option("--bins", options->bins, "Number of bins K (microbatches x data-parallel replicas)")->required();
  command->add_option("--packer", options->packer, "sequential, lpt, karmarkar_karp, refined (default) or exact")
      ->check(CLI::IsMember({"sequential", "lpt", "karmarkar_karp", "refined", "exact"}));
  command->add_option("--seed", options->seed, "Seed for the randomized parts (default 0)");
  command->add_flag("--json", options->json,
                    "Print {\"packer\", \"bins\", \"makespan\", \"lower_bound\", \"seconds\"} as one JSON object");
  command->callback([options] { run_pack(*options); });
}

}  // namespace

DFLOP_REGISTER_COMMAND("pack", install_pack_command);
