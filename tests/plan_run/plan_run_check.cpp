// SPDX-License-Identifier: Apache-2.0
// Runs `dflop-train-toy --plan ... --json` (directly or under mpirun) and checks
// what it prints. Modes:
//
//   runs STEPS -- COMMAND...
//     STEPS step lines, each with the loss of a batch whose every sample ran once
//     (N (N + 1) / 2 for N samples, see emulated_stage), and a summary whose
//     medians are those of the step lines.
//   agrees MAX -- COMMAND... ::: COMMAND...
//     each command's median measured/predicted is within MAX of 1, and the measured
//     speedup of the first command's method over each other's is within MAX
//     (relative) of the predicted one. Must hold in one of three runs (timing).
//   fails STATUS TEXT -- COMMAND...
//     the command exits with STATUS and its output contains TEXT.
//   edit PLAN OUT POINTER VALUE
//     writes PLAN with the JSON value at POINTER (e.g. /config/llm/dp) replaced by
//     VALUE (JSON; "+=N" adds N to the number there) to OUT: a hand-edited plan file.
#include "../command_runner.hpp"
#include "../run_lines.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using dflop::test::command;
using dflop::test::fail;

using dflop::test::run_lines;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

run_lines run_ok(const command& cmd) { return dflop::test::parse_run_lines(dflop::test::run_ok(cmd)); }

void check_runs(std::size_t steps, const command& cmd) {
  const auto lines = run_ok(cmd);
  if (lines.steps.size() != steps)
    fail(std::to_string(lines.steps.size()) + " step lines, expected " + std::to_string(steps));
  std::vector<double> measured, predicted;
  for (const auto& step : lines.steps) {
    const double n = step.at("samples").get<double>();
    if (step.at("loss").get<double>() != n * (n + 1) / 2)
      fail("step " + step.at("step").dump() + ": loss " + step.at("loss").dump() +
           " is not the sum over every sample once (" + std::to_string(n * (n + 1) / 2) + ")");
    if (!(step.at("measured_seconds").get<double>() > 0)) fail("no measured time");
    if (!(step.at("predicted_seconds").get<double>() >= 0)) fail("no predicted time");
    measured.push_back(step.at("measured_seconds").get<double>());
    predicted.push_back(step.at("predicted_seconds").get<double>());
  }
  if (lines.summary.at("median_measured_seconds").get<double>() != median(measured) ||
      lines.summary.at("median_predicted_seconds").get<double>() != median(predicted))
    fail("the summary's medians are not the step lines'");
}

// One attempt of `agrees`; returns what failed (empty: all held).
std::string agrees_once(double max, const std::vector<command>& commands) {
  std::vector<nlohmann::json> summaries;
  std::ostringstream why;
  for (const auto& cmd : commands) {
    summaries.push_back(run_ok(cmd).summary);
    const auto& s = summaries.back();
    const double ratio = s.at("measured_over_predicted").get<double>();
    std::cerr << s.at("method").get<std::string>() << ": measured/predicted " << ratio << "\n";
    if (std::abs(ratio - 1) > max) why << s.at("method").get<std::string>() << " measured/predicted " << ratio << "; ";
  }
  const auto& first = summaries.front();
  for (std::size_t i = 1; i < summaries.size(); ++i) {
    const auto& other = summaries[i];
    const double measured = other.at("median_measured_seconds").get<double>() / first.at("median_measured_seconds").get<double>();
    const double predicted =
        other.at("median_predicted_seconds").get<double>() / first.at("median_predicted_seconds").get<double>();
    std::cerr << "speedup over " << other.at("method").get<std::string>() << ": measured " << measured
              << ", predicted " << predicted << "\n";
    if (std::abs(measured / predicted - 1) > max)
      why << "speedup over " << other.at("method").get<std::string>() << " measured " << measured << " vs predicted "
          << predicted << "; ";
  }
  return why.str();
}

std::vector<command> split_commands(const command& words) {
  std::vector<command> out(1);
  for (const auto& word : words) {
    if (word == ":::") out.emplace_back();
    else out.back().push_back(word);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    const auto dashes = std::find(args.begin(), args.end(), "--");
    const std::vector<std::string> head(args.begin(), dashes);
    const command tail = dashes == args.end() ? command{} : command(dashes + 1, args.end());
    if (head.empty()) fail("usage: plan_run_check MODE ARGS... -- COMMAND...");
    const std::string& mode = head[0];
    if (mode == "runs" && head.size() == 2) {
      check_runs(std::stoul(head[1]), tail);
    } else if (mode == "agrees" && head.size() == 2) {
      const auto commands = split_commands(tail);
      std::string why;
      for (int attempt = 0; attempt < 3; ++attempt) {
        why = agrees_once(std::stod(head[1]), commands);
        if (why.empty()) break;
        std::cerr << "attempt " << attempt + 1 << ": " << why << "\n";
      }
      if (!why.empty()) fail(why);
    } else if (mode == "fails" && head.size() == 3) {
      const auto out = dflop::test::run_command(tail, true);
      std::cerr << out.output;
      if (out.status != std::stoi(head[1])) fail("exit status " + std::to_string(out.status) + ", expected " + head[1]);
      if (out.output.find(head[2]) == std::string::npos) fail("the output does not say '" + head[2] + "'");
    } else if (mode == "edit" && head.size() == 5) {
      std::ifstream in(head[1]);
      if (!in) fail("cannot read " + head[1]);
      nlohmann::ordered_json plan = nlohmann::ordered_json::parse(in);
      auto& value = plan.at(nlohmann::ordered_json::json_pointer(head[3]));
      if (head[4].rfind("+=", 0) == 0) value = value.get<std::int64_t>() + std::stoll(head[4].substr(2));
      else value = nlohmann::ordered_json::parse(head[4]);
      std::ofstream(head[2]) << plan.dump(2) << "\n";
    } else {
      fail("unknown mode or wrong arguments: " + mode);
    }
    std::cerr << "plan_run_check " << mode << ": ok\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "plan_run_check: " << e.what() << "\n";
    return 1;
  }
}
