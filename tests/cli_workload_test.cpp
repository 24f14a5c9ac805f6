// SPDX-License-Identifier: Apache-2.0
#include "cli_support.hpp"

#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

using dflop::test::run_cli;

TEST_CASE("dflop generate writes a trace that dflop stats reads back", "[workload][cli]") {
  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/cli_workload_generated.jsonl";
  const auto generated = run_cli("generate --mixture video-heavy --samples 400 --seed 3 --output '" + path + "'",
                                 "cli_workload_generate");
  REQUIRE(generated.exit_code == 0);
  const auto samples = dflop::read_trace_file(path);
  REQUIRE(samples.size() == 400);

  const auto to_stdout = run_cli("generate --mixture video-heavy --samples 400 --seed 3", "cli_workload_stdout");
  REQUIRE(to_stdout.exit_code == 0);
  CHECK(dflop::read_trace_text(to_stdout.out) == samples);

  const auto table = run_cli("stats --workload '" + path + "'", "cli_workload_stats");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("samples:  400"));
  CHECK_THAT(table.out, Catch::Contains("llm_tokens"));

  const auto json = run_cli("stats --json --workload '" + path + "'", "cli_workload_stats_json");
  REQUIRE(json.exit_code == 0);
  const auto report = nlohmann::json::parse(json.out);
  CHECK(report["samples"] == 400);
  std::size_t videos = 0;
  std::int64_t most_llm_tokens = 0;
  for (const auto& s : samples) {
    videos += s.kind == dflop::modality::video ? 1 : 0;
    most_llm_tokens = std::max(most_llm_tokens, s.llm_tokens);
  }
  CHECK(report["modalities"]["video"]["count"] == videos);
  CHECK(report["fields"]["llm_tokens"]["max"] == most_llm_tokens);
}

TEST_CASE("dflop stats without a workload describes the built-in mixture and says so", "[workload][cli]") {
  const auto result = run_cli("stats", "cli_workload_default");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("built-in mixture 'onevision' (10000 samples, seed 0)"));
  const auto json = run_cli("stats --json", "cli_workload_default_json");
  REQUIRE(json.exit_code == 0);
  CHECK(nlohmann::json::parse(json.out)["workload"]["source"] == "built-in");
}

TEST_CASE("bad workload input exits with status 2 and names the line", "[workload][cli]") {
  const std::string path = dflop::test::write_scratch_file(
      "cli_workload_malformed.jsonl",
      "{\"id\":\"a\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,\"llm_tokens\":5}\n"
      "{\"id\":\"b\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,\"llm_tokens\":\"many\"}\n");
  const auto result = run_cli("stats --workload '" + path + "'", "cli_workload_malformed");
  CHECK(result.exit_code == 2);
  CHECK_THAT(result.err, Catch::Contains("dflop: error: " + path + ":2: field 'llm_tokens' must be an integer"));

  const auto unknown = run_cli("generate --mixture nonsense --samples 5", "cli_workload_unknown_mixture");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("unknown mixture 'nonsense' (known: onevision"));

  const auto zero = run_cli("generate --samples 0", "cli_workload_zero_samples");
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.err, Catch::Contains("--samples: must be at least 1"));

  const auto missing = run_cli("stats --workload /nonexistent/trace.jsonl", "cli_workload_missing");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("cannot open file for reading"));
}

TEST_CASE("--help works for stats and generate", "[workload][cli]") {
  const auto stats_help = run_cli("stats --help", "cli_workload_stats_help");
  CHECK(stats_help.exit_code == 0);
  CHECK_THAT(stats_help.out, Catch::Contains("--workload"));
  const auto generate_help = run_cli("generate --help", "cli_workload_generate_help");
  CHECK(generate_help.exit_code == 0);
  CHECK_THAT(generate_help.out, Catch::Contains("video-heavy"));
}
