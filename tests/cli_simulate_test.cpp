// SPDX-License-Identifier: Apache-2.0
// `dflop simulate`: JSON and text output, the trace file, and exit status 2 with
// the offending line for bad cost files.
#include "cli_support.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

using dflop::test::run_cli;
using dflop::test::write_scratch_file;

namespace {

// S = 2 stages, m = 3 microbatches, f = 1, b = 2, w = 0.5 everywhere.
std::string uniform_csv() {
  std::string text = "microbatch,stage,forward,backward,weight\n";
  for (int j = 0; j < 3; ++j)
    for (int s = 0; s < 2; ++s) text.append(std::to_string(j) + "," + std::to_string(s) + ",1,2,0.5\n");
  return text;
}

}  // namespace

TEST_CASE("simulate --json prints makespan, bubble, busy time and op count", "[sim][cli]") {
  const auto costs = write_scratch_file("simulate_uniform.csv", uniform_csv());
  for (const char* schedule : {"1f1b", "gpipe"}) {
    const auto result = run_cli(std::string("simulate --schedule ") + schedule + " --costs '" + costs + "' --json",
                                "simulate_json");
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    const auto report = nlohmann::json::parse(result.out);
    // (m + S - 1)(f + b + w) = 4 x 3.5; each stage busy 3 x 3.5.
    CHECK(report["makespan"].get<double>() == Approx(14.0));
    CHECK(report["bubble_fraction"].get<double>() == Approx(0.25));
    CHECK(report["stage_busy"] == nlohmann::json::array({10.5, 10.5}));
    CHECK(report["ops"] == 12);
  }
  const auto zero = run_cli("simulate --schedule zb-h1 --costs '" + costs + "' --json --order neh", "simulate_zb");
  REQUIRE(zero.exit_code == 0);
  CHECK(nlohmann::json::parse(zero.out)["ops"] == 18);
  const auto interleaved = run_cli("simulate --schedule interleaved --chunks 3 --costs '" + costs + "' --json",
                                   "simulate_interleaved");
  INFO(interleaved.err);
  REQUIRE(interleaved.exit_code != 0);  // m = 3 is not a multiple of S = 2
  CHECK(interleaved.exit_code == 2);
  CHECK(interleaved.err.find("must be a multiple of the stages") != std::string::npos);
}

TEST_CASE("simulate prints a summary, a text timeline and writes a trace", "[sim][cli]") {
  const auto costs = write_scratch_file("simulate_text.csv", uniform_csv());
  const std::string trace = std::string(DFLOP_TEST_SCRATCH_DIR) + "/simulate_trace.json";
  const auto result = run_cli("simulate --schedule zb-h1 --costs '" + costs + "' --order johnson --trace '" + trace + "'",
                              "simulate_text");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("schedule   zb-h1 (2 stages, 3 microbatches, 18 ops)") != std::string::npos);
  CHECK(result.out.find("makespan") != std::string::npos);
  CHECK(result.out.find("stage 0 |F") != std::string::npos);
  CHECK(result.out.find("stage 1 |") != std::string::npos);
  std::ifstream in(trace);
  const auto json = nlohmann::json::parse(in);
  std::size_t complete = 0;
  for (const auto& event : json["traceEvents"]) complete += event["ph"] == "X";
  CHECK(complete == 18);
}

TEST_CASE("simulate exits 2 naming the line of bad cost files", "[sim][cli]") {
  const auto check_error = [](const std::string& name, const std::string& content, const std::string& expected,
                              const std::string& schedule = "1f1b") {
    const auto path = write_scratch_file(name, content);
    const auto result = run_cli("simulate --schedule " + schedule + " --costs '" + path + "' --json", name);
    INFO(result.err);
    CHECK(result.exit_code == 2);
    CHECK(result.err.find(path + expected) != std::string::npos);
  };
  check_error("sim_missing_pair.csv", "microbatch,stage,forward,backward\n0,0,1,1\n0,1,1,1\n1,0,1,1\n",
              ":4: microbatch 1 has no row for stage 1");
  check_error("sim_negative.csv", "microbatch,stage,forward,backward\n0,0,1,1\n0,1,-2,1\n",
              ":3: column 'forward': negative value -2");
  check_error("sim_gap_microbatch.csv", "microbatch,stage,forward,backward\n0,0,1,1\n2,0,1,1\n",
              ":3: gap in microbatch numbering: microbatch 1 has no rows (numbers must run 0..2)");
  check_error("sim_gap_stage.csv", "microbatch,stage,forward,backward\n0,0,1,1\n0,2,1,1\n",
              ":3: gap in stage numbering: stage 1 has no rows (numbers must run 0..2)");
  check_error("sim_duplicate.csv", "microbatch,stage,forward,backward\n0,0,1,1\n0,0,1,1\n",
              ":3: microbatch 0, stage 0 given twice (first on line 2)");
  check_error("sim_no_weight.csv", "microbatch,stage,forward,backward\n0,0,1,1\n", ":1: missing column 'weight'", "zb-h1");
  check_error("sim_not_number.csv", "microbatch,stage,forward,backward\n0,x,1,1\n", ":2: column 'stage': 'x' is not an integer");
  check_error("sim_empty.csv", "microbatch,stage,forward,backward\n", ":1: no cost rows after the header");

  const auto missing = run_cli("simulate --schedule 1f1b --costs /nonexistent/costs.csv", "sim_missing_file");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("cannot open file") != std::string::npos);
  const auto costs = write_scratch_file("simulate_ok.csv", uniform_csv());
  CHECK(run_cli("simulate --schedule pipedream --costs '" + costs + "'", "sim_bad_schedule").exit_code == 2);
  CHECK(run_cli("simulate --schedule 1f1b --chunks 2 --costs '" + costs + "'", "sim_bad_chunks").exit_code == 2);
}
