// SPDX-License-Identifier: Apache-2.0
// Runs `dflop-torch-trainer ... --json` (directly or under mpirun) and checks what
// it prints. Modes:
//
//   agrees TOLERANCE STEPS -- COMMAND...
//     exit 0; STEPS step lines; STEPS check lines (the command runs with --check),
//     each with a finite pipelined loss within TOLERANCE (relative) of the
//     single-process run's loss of the same batch, recomputed here; a summary.
//   falls STEPS FACTOR -- COMMAND...
//     exit 0; STEPS finite step losses; the mean of the last three is below
//     FACTOR times the mean of the first three.
//   fails STATUS TEXT -- COMMAND...
//     the command exits with STATUS and its output contains TEXT.
#include "../command_runner.hpp"
#include "../run_lines.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using dflop::test::command;
using dflop::test::fail;

using dflop::test::run_lines;

double number(const nlohmann::json& line, const char* field) {
  if (!line.contains(field) || !line[field].is_number()) fail(std::string("no finite '") + field + "' in " + line.dump());
  const double value = line[field].get<double>();
  if (!std::isfinite(value)) fail(std::string("'") + field + "' is not finite in " + line.dump());
  return value;
}

run_lines run_steps(const command& cmd, std::size_t steps) {
  auto outcome = dflop::test::run_command(cmd);
  if (outcome.status != 0) fail("exit status " + std::to_string(outcome.status) + "\n" + outcome.output);
  run_lines lines = dflop::test::parse_run_lines(outcome.output);
  if (lines.steps.size() != steps)
    fail("expected " + std::to_string(steps) + " step lines, got " + std::to_string(lines.steps.size()));
  for (const auto& step : lines.steps) {
    number(step, "loss");
    if (number(step, "measured_seconds") <= 0) fail("a step took no time: " + step.dump());
    if (number(step, "predicted_seconds") <= 0) fail("a step has no prediction: " + step.dump());
  }
  return lines;
}

void agrees(double tolerance, std::size_t steps, const command& cmd) {
  const run_lines lines = run_steps(cmd, steps);
  if (lines.checks.size() != steps)
    fail("expected " + std::to_string(steps) + " check lines (run with --check), got " + std::to_string(lines.checks.size()));
  for (std::size_t k = 0; k < steps; ++k) {
    const double pipelined = number(lines.steps[k], "loss");
    const double single = number(lines.checks[k], "reference_loss");
    if (number(lines.checks[k], "loss") != pipelined) fail("check line " + std::to_string(k) + " shows another loss");
    const double difference = std::abs(pipelined - single) / std::abs(single);
    std::cerr << "step " << k << ": pipelined " << pipelined << ", single-process " << single << ", relative "
              << difference << "\n";
    if (!(difference <= tolerance))
      fail("step " + std::to_string(k) + ": relative difference " + std::to_string(difference) + " > " +
           std::to_string(tolerance));
  }
}

void falls(std::size_t steps, double factor, const command& cmd) {
  if (steps < 6) fail("falls needs at least 6 steps");
  const run_lines lines = run_steps(cmd, steps);
  double first = 0, last = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    first += number(lines.steps[k], "loss") / 3;
    last += number(lines.steps[steps - 1 - k], "loss") / 3;
  }
  std::cerr << "mean loss of the first three steps " << first << ", of the last three " << last << "\n";
  if (!(last < factor * first)) fail("the loss did not fall below " + std::to_string(factor) + " x its start");
}

void fails(int status, const std::string& text, const command& cmd) {
  const auto outcome = dflop::test::run_command(cmd, true);
  if (outcome.status != status)
    fail("expected exit status " + std::to_string(status) + ", got " + std::to_string(outcome.status) + "\n" +
         outcome.output);
  if (outcome.output.find(text) == std::string::npos) fail("output lacks '" + text + "':\n" + outcome.output);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::size_t split = 0;
    while (split < args.size() && args[split] != "--") ++split;
    if (split + 1 >= args.size() || args.empty()) fail("usage: torch_trainer_check MODE ARGS... -- COMMAND...");
    const command cmd(args.begin() + static_cast<std::ptrdiff_t>(split) + 1, args.end());
    const std::string& mode = args[0];
    if (mode == "agrees" && split == 3) agrees(std::stod(args[1]), std::stoul(args[2]), cmd);
    else if (mode == "falls" && split == 3) falls(std::stoul(args[1]), std::stod(args[2]), cmd);
    else if (mode == "fails" && split == 3) fails(std::stoi(args[1]), args[2], cmd);
    else fail("unknown mode or wrong arguments: " + mode);
    std::cerr << "ok\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "torch_trainer_check: " << e.what() << "\n";
    return 1;
  }
}
