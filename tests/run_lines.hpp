// SPDX-License-Identifier: Apache-2.0
//! The JSON lines a trainer prints with `--json` (dflop-train-toy,
//! dflop-torch-trainer): one object per step, optional `"check": true` lines
//! comparing a step with its single-process run, and one `"summary": true` line.
#pragma once

#include "command_runner.hpp"

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace dflop::test {

//! A run's JSON lines by kind.
struct run_lines {
  std::vector<nlohmann::json> steps;   //!< one per step, in order
  std::vector<nlohmann::json> checks;  //!< `"check": true` lines, in order
  nlohmann::json summary;              //!< the `"summary": true` line
};

//! The JSON lines of `output` (lines not starting with '{' are skipped); fails without a summary.
inline run_lines parse_run_lines(const std::string& output) {
  run_lines out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    auto value = nlohmann::json::parse(line);
    if (value.value("summary", false))
      out.summary = std::move(value);
    else if (value.value("check", false))
      out.checks.push_back(std::move(value));
    else
      out.steps.push_back(std::move(value));
  }
  if (out.summary.is_null()) fail("no summary line");
  return out;
}

}  // namespace dflop::test
