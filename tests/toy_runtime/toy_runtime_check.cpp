// SPDX-License-Identifier: Apache-2.0
// Runs dflop-train-toy (directly or under mpirun) and checks what its --json lines
// say about the runtime loop. Modes:
//
//   converges WINDOW MAX_ERROR STEPS -- COMMAND...
//     STEPS step lines; the mean prediction error |predicted - measured| / measured
//     of the last WINDOW steps is below MAX_ERROR and below the first WINDOW steps';
//     planning is hidden (mean wait in next() over steps 1.. under half the mean
//     planning time); the summary line agrees with the step lines. The timing
//     claims must hold in one of three runs (measured times have outliers).
//   same FIELD[,FIELD...] -- COMMAND... [::: COMMAND...]...
//     every command prints the same steps, and each FIELD is bitwise equal across
//     the commands that print it (at least two must).
//   synchronous -- COMMAND...
//     (--lookahead 0) every step waited at least its planning time: the wait is measured.
//   profile CSV SIZES -- COMMAND... ::: TRAIN_COMMAND...
//     COMMAND writes CSV, which read_profile parses to one 'llm' curve at tp 1 with
//     exactly SIZES; with --op-cost-us A,B in COMMAND the times are at least the
//     emulated sleeps; TRAIN_COMMAND (training from the table) predicts every step.
#include "../command_runner.hpp"

#include <dflop/cost/profile.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using dflop::test::command;
using dflop::test::fail;

// Runs `cmd` (stderr passes through) and returns its standard output; fails on a non-zero status.
std::string run(const command& cmd) { return dflop::test::run_ok(cmd); }

struct run_lines {
  std::vector<nlohmann::json> steps;
  std::vector<nlohmann::json> summaries;
};

run_lines parse(const std::string& out) {
  run_lines lines;
  std::istringstream in(out);
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty() || text.front() != '{') continue;
    auto line = nlohmann::json::parse(text);
    if (line.contains("summary")) lines.summaries.push_back(std::move(line));
    else if (line.contains("step")) lines.steps.push_back(std::move(line));
  }
  return lines;
}

double mean(const std::vector<double>& values, std::size_t first, std::size_t last) {
  double sum = 0;
  for (std::size_t i = first; i < last; ++i) sum += values[i];
  return sum / static_cast<double>(last - first);
}

void check_steps(const run_lines& lines, std::size_t steps) {
  if (lines.steps.size() != steps)
    fail("expected " + std::to_string(steps) + " step lines, got " + std::to_string(lines.steps.size()));
  for (std::size_t k = 0; k < steps; ++k)
    if (lines.steps[k].at("step").get<std::size_t>() != k) fail("step lines out of order at " + std::to_string(k));
}

// One run of `converges`: fails on malformed output; returns why the timing claims
// (error below the bound and falling, planning hidden) missed, or "" when they held.
std::string converges_once(std::size_t window, double max_error, std::size_t steps, const command& cmd) {
  const auto lines = parse(run(cmd));
  check_steps(lines, steps);
  if (steps < 2 * window) fail("fewer steps than two windows");
  std::vector<double> errors, planning, waits;
  for (const auto& step : lines.steps) {
    const double predicted = step.at("predicted_seconds"), measured = step.at("measured_seconds");
    if (!(predicted > 0) || !(measured > 0)) fail("step " + step.dump() + ": times must be > 0");
    const double error = std::abs(predicted - measured) / measured;
    if (std::abs(error - step.at("prediction_error").get<double>()) > 1e-12 * (1 + error))
      fail("step " + step.dump() + ": prediction_error is not |predicted - measured| / measured");
    errors.push_back(error);
    planning.push_back(step.at("planning_seconds"));
    waits.push_back(step.at("planning_wait_seconds"));
  }
  const double first = mean(errors, 0, window), last = mean(errors, steps - window, steps);
  const double plan = mean(planning, 0, steps), wait = mean(waits, 1, steps);
  std::cout << "mean prediction error: first " << window << " steps " << first * 100 << "%, last " << window
            << " steps " << last * 100 << "%\nmean planning " << plan * 1e3 << " ms, mean wait for the plan (steps 1..) "
            << wait * 1e3 << " ms\n";
  if (lines.summaries.size() != 1) fail("expected one summary line");
  const auto& summary = lines.summaries.front();
  const auto agrees = [](double reported, double computed) { return std::abs(reported - computed) <= 1e-9 * (1 + computed); };
  if (summary.at("window").get<std::size_t>() != window || !agrees(summary.at("mean_prediction_error_first"), first) ||
      !agrees(summary.at("mean_prediction_error_last"), last) || !agrees(summary.at("mean_planning_seconds"), plan) ||
      !agrees(summary.at("mean_planning_wait_seconds"), wait))
    fail("the summary disagrees with the step lines: " + summary.dump());
  if (!(last < max_error)) return "the last steps' mean error " + std::to_string(last) + " is not below " + std::to_string(max_error);
  if (!(last < first)) return "the last steps' mean error is not below the first steps'";
  if (!(wait < 0.5 * plan)) return "planning is not hidden: the trainer waited " + std::to_string(wait) + " s per step";
  return {};
}

// The timing claims hold in one of three runs: measured times on a shared machine
// have outliers (another process takes the core), malformed output fails at once.
int converges(std::size_t window, double max_error, std::size_t steps, const command& cmd) {
  constexpr int attempts = 3;
  for (int attempt = 1;; ++attempt) {
    const std::string missed = converges_once(window, max_error, steps, cmd);
    if (missed.empty()) return 0;
    if (attempt == attempts) fail(missed + " (in each of " + std::to_string(attempts) + " runs)");
    std::cout << "run " << attempt << ": " << missed << "; running again\n";
  }
}

int same(const std::vector<std::string>& fields, const std::vector<command>& commands) {
  std::vector<run_lines> runs;
  for (const auto& cmd : commands) runs.push_back(parse(run(cmd)));
  const std::size_t steps = runs.front().steps.size();
  if (steps == 0) fail("no step lines");
  for (const auto& lines : runs) check_steps(lines, steps);
  for (const auto& field : fields) {
    int printing = 0;
    const run_lines* reference = nullptr;
    for (const auto& lines : runs) {
      if (!lines.steps.front().contains(field)) continue;
      ++printing;
      if (!reference) reference = &lines;
      for (std::size_t k = 0; k < steps; ++k)
        if (reference->steps[k].at(field).get<double>() != lines.steps[k].at(field).get<double>())
          fail("field '" + field + "' differs at step " + std::to_string(k));
    }
    if (printing < 2) fail("field '" + field + "' is printed by fewer than two commands");
    std::cout << "'" << field << "' equal over " << printing << " runs of " << steps << " steps\n";
  }
  return 0;
}

int synchronous(const command& cmd) {
  const auto lines = parse(run(cmd));
  if (lines.steps.empty()) fail("no step lines");
  for (const auto& step : lines.steps)
    if (!(step.at("planning_wait_seconds").get<double>() >= step.at("planning_seconds").get<double>()) ||
        !(step.at("planning_seconds").get<double>() > 0))
      fail("with --lookahead 0 the trainer must wait for the whole planning: " + step.dump());
  std::cout << lines.steps.size() << " steps waited for their planning\n";
  return 0;
}

int profile(const std::string& csv, const std::string& sizes_text, const command& cmd, const command& train) {
  std::vector<double> sizes;
  std::istringstream in(sizes_text);
  for (std::string size; std::getline(in, size, ',');) sizes.push_back(std::stod(size));
  std::remove(csv.c_str());
  run(cmd);
  const dflop::profile table = dflop::read_profile_file(csv);
  if (table.curves.size() != 1 || table.curves[0].piece != dflop::module_piece{dflop::module_kind::llm, dflop::module_part::layer} ||
      table.curves[0].tp != 1)
    fail("expected one 'llm' curve at tp 1");
  const auto& points = table.curves[0].points;
  if (points.size() != sizes.size()) fail("expected " + std::to_string(sizes.size()) + " sizes, got " + std::to_string(points.size()));
  // The emulated sleeps of --op-cost-us A,B bound every time from below.
  double a = 0, b = 0;
  for (std::size_t i = 0; i + 1 < cmd.size(); ++i)
    if (cmd[i] == "--op-cost-us") std::sscanf(cmd[i + 1].c_str(), "%lf,%lf", &a, &b);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double emulated = (a + b * sizes[i]) * 1e-6;
    if (points[i].size != sizes[i]) fail("size " + std::to_string(i) + " is " + std::to_string(points[i].size));
    if (!(points[i].forward_seconds > 0 && points[i].forward_seconds >= emulated &&
          points[i].backward_seconds >= 2 * emulated))
      fail("size " + std::to_string(sizes[i]) + ": times below the emulated device time");
  }
  std::cout << csv << ": " << points.size() << " sizes, as asked\n";
  const auto lines = parse(run(train));
  if (lines.steps.empty()) fail("training from the table printed no steps");
  for (const auto& step : lines.steps)
    if (!(step.at("predicted_seconds").get<double>() > 0)) fail("no prediction from the table: " + step.dump());
  std::cout << "trained " << lines.steps.size() << " steps from the table\n";
  return 0;
}

// Splits ARGS at "--", then at ":::" into commands.
std::vector<command> commands_after_dashes(const std::vector<std::string>& args, std::size_t from) {
  std::vector<command> out(1);
  for (std::size_t i = from; i < args.size(); ++i) {
    if (args[i] == ":::") out.emplace_back();
    else out.back().push_back(args[i]);
  }
  for (const auto& cmd : out)
    if (cmd.empty()) fail("empty command");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    std::size_t dashes = 0;
    while (dashes < args.size() && args[dashes] != "--") ++dashes;
    if (args.empty() || dashes == args.size()) fail("usage: toy_runtime_check MODE ARGS... -- COMMAND...");
    const auto commands = commands_after_dashes(args, dashes + 1);
    const std::string& mode = args[0];
    if (mode == "converges" && dashes == 4)
      return converges(std::stoul(args[1]), std::stod(args[2]), std::stoul(args[3]), commands.at(0));
    if (mode == "same" && dashes == 2) {
      std::vector<std::string> fields;
      std::istringstream in(args[1]);
      for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
      return same(fields, commands);
    }
    if (mode == "synchronous" && dashes == 1) return synchronous(commands.at(0));
    if (mode == "profile" && dashes == 3 && commands.size() == 2) return profile(args[1], args[2], commands[0], commands[1]);
    fail("unknown mode or wrong arguments: " + mode);
  } catch (const std::exception& e) {
    std::cerr << "toy_runtime_check: " << e.what() << "\n";
    return 1;
  }
}
