// SPDX-License-Identifier: Apache-2.0
//! `dflop simulate`: runs a pipeline schedule over per-op costs from a CSV file and
//! shows where the time goes: makespan, bubble, busy time per stage, a text
//! timeline, optionally a Chrome trace (Perfetto) or JSON.
#include "command.hpp"

#include <dflop/error.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim.hpp>
#include <dflop/util/csv.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

//! What the user asked `simulate` for.
struct simulate_options {
  std::string schedule;
  std::string costs;
  std::uint32_t chunks = 0;  // 0: the schedule's default (2 for interleaved, else 1)
  std::string order = "identity";
  std::size_t budget = 1000;
  double transfer = 0;
  std::string trace;
  bool json = false;
  std::size_t width = 100;
};

//! `value` with `digits` significant digits ("%.*g").
std::string number(double value, int digits = 6) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*g", digits, value);
  return text;
}

//! `value` with one decimal ("%.1f").
std::string one_decimal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

void run_simulate(const simulate_options& options) {
  const bool split = options.schedule == dflop::zero_bubble_h1::name();
  const bool interleaved = options.schedule == dflop::interleaved_1f1b::name();
  const std::uint32_t chunks = options.chunks != 0 ? options.chunks : (interleaved ? 2U : 1U);
  if (chunks != 1 && !interleaved) throw dflop::input_error("--chunks", 0, "only the 'interleaved' schedule takes chunks");

  auto per_rank = dflop::read_pipeline_costs(dflop::read_csv_file(options.costs), split);
  if (options.transfer > 0) per_rank.transfer.assign(per_rank.forward.size(), options.transfer);
  const dflop::schedule_shape shape{per_rank.stages, per_rank.microbatches};
  dflop::pipeline_schedule schedule;
  try {
    schedule = dflop::make_schedule(options.schedule, shape, chunks);
  } catch (const dflop::schedule_error& e) {
    throw dflop::input_error(options.costs, 0, e.what());
  }
  const auto costs = dflop::spread_over_chunks(per_rank, chunks);

  dflop::pipeline_simulator simulator;
  const auto policy = *dflop::parse_order_policy(options.order);
  // Johnson's two groups are the first and second halves of the ranks' stages.
  const auto ordered = dflop::order_microbatches(policy, schedule, costs, simulator, options.budget,
                                                 std::max(1U, shape.ranks / 2));
  const auto result = simulator.simulate(schedule, costs, ordered.order);
  const auto line = dflop::make_timeline(schedule, result, ordered.order);
  if (!options.trace.empty()) dflop::write_chrome_trace(line, options.trace);

  if (options.json) {
    nlohmann::ordered_json report;
    report["makespan"] = result.makespan;
    report["bubble_fraction"] = result.bubble_fraction;
    report["stage_busy"] = result.busy;
    report["ops"] = schedule.op_count();
    std::cout << report.dump() << '\n';
    return;
  }
  std::cout << "schedule   " << schedule.name << " (" << schedule.ranks << " stages";
  if (schedule.chunks > 1) std::cout << " x " << schedule.chunks << " chunks";
  std::cout << ", " << schedule.microbatches << " microbatches, " << schedule.op_count() << " ops)\n";
  std::cout << "order      " << options.order;
  if (policy == dflop::order_policy::neh) std::cout << " (" << ordered.evaluations << " simulations)";
  std::cout << "\nmakespan   " << number(result.makespan) << "\nbubble     " << one_decimal(100.0 * result.bubble_fraction)
            << " %\n";
  std::cout << "stage  busy        idle %  peak activations\n";
  for (std::size_t r = 0; r < result.ranks(); ++r) {
    const double idle = result.makespan > 0 ? 100.0 * (1.0 - result.busy[r] / result.makespan) : 0.0;
    std::cout << std::left << std::setw(7) << r << std::setw(12) << number(result.busy[r]) << std::right << std::setw(6)
              << one_decimal(idle) << "  " << result.peak_activations[r] << '\n';
  }
  std::cout << '\n' << dflop::render_text_timeline(line, options.width);
  std::cout << "F forward  B backward" << (split ? "  W weight gradient" : "") << "  . idle\n";
  if (!options.trace.empty()) std::cout << "trace written to " << options.trace << " (open in ui.perfetto.dev)\n";
}

void install_simulate_command(CLI::App& app) {
  auto options = std::make_shared<simulate_options>();
  auto* command = app.add_subcommand("simulate", "Simulate a pipeline schedule over per-op costs from a CSV file");
  std::vector<std::string> schedules(dflop::schedule_names.begin(), dflop::schedule_names.end());
  command->add_option("--schedule", options->schedule, "Pipeline schedule")->required()->check(CLI::IsMember(schedules));
  command->add_option("--costs", options->costs,
                      "CSV with columns microbatch,stage,forward,backward[,weight][,transfer]: one row per "
                      "(microbatch, stage), stages are pipeline ranks, times in seconds (weight needed by zb-h1)")
      ->required();
  command->add_option("--chunks", options->chunks,
                      "Model chunks per rank for 'interleaved' (default 2); each chunk costs 1/V of its rank's row")
      ->check(CLI::Range(1, 64));
  command->add_option("--order", options->order, "Microbatch order: identity, johnson or neh (simulator-guided search)")
      ->check(CLI::IsMember({"identity", "johnson", "neh"}));
  command->add_option("--budget", options->budget, "Simulations the 'neh' order may spend (default 1000)");
  command->add_option("--transfer", options->transfer, "Seconds per activation/gradient hop between ranks (default 0)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--trace", options->trace, "Write a Chrome trace event JSON file (Perfetto, chrome://tracing)");
  command->add_option("--width", options->width, "Characters of the text timeline (default 100)")->check(CLI::Range(10, 1000));
  command->add_flag("--json", options->json,
                    "Print {\"makespan\", \"bubble_fraction\", \"stage_busy\", \"ops\"} as one JSON object");
  command->callback([options] { run_simulate(*options); });
}

}  // namespace

DFLOP_REGISTER_COMMAND("simulate", install_simulate_command);
