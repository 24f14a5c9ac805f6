// SPDX-License-Identifier: Apache-2.0
// `dflop plan` and `dflop demo`: the JSON fields the issue promises, the
// side-by-side table, the trace file, and exit status 2 with a clear message for
// bad input. Small clusters keep each run well under a second.
#include "cli_support.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

using dflop::test::run_cli;
using dflop::test::write_scratch_file;

namespace {

// A workload file of 200 samples from the generator, so `--workload` is exercised
// (one per process: ctest runs the test cases as parallel processes).
std::string small_trace() {
  const std::string path =
      std::string(DFLOP_TEST_SCRATCH_DIR) + "/plan_workload_" + std::to_string(::getpid()) + ".jsonl";
  const auto made = run_cli("generate --mixture onevision --samples 200 --seed 3 --output '" + path + "'", "plan_gen");
  REQUIRE(made.exit_code == 0);
  return path;
}

const std::string small_case = " --model siglip-400m+qwen2.5-7b --gpus 16 --gpus-per-node 8 --gpu h100-80gb"
                               " --global-batch 64 --batches 2 --seed 1";

}  // namespace

TEST_CASE("plan --json prints the configuration, prediction, memory and both baselines", "[plan][cli]") {
  const auto result = run_cli("plan --workload '" + small_trace() + "'" + small_case + " --json", "plan_json");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto plan = nlohmann::json::parse(result.out);
  const auto& config = plan["config"];
  int gpus = 0;
  for (const char* module : {"encoder", "llm"}) {
    const auto& degrees = config[module];
    gpus += degrees["tp"].get<int>() * degrees["pp"].get<int>() * degrees["dp"].get<int>();
    CHECK(degrees["layers"].size() == degrees["pp"].get<std::size_t>());
    CHECK(degrees.contains("recompute"));
    CHECK(degrees.contains("distributed_optimizer"));
  }
  CHECK(gpus == 16);
  CHECK(config["microbatches"].get<int>() >= 1);
  const double seconds = plan["iteration_seconds"].get<double>();
  // --schedule auto (the default): the finalists scored under both schedules, the faster kept.
  const auto& trials = plan["search"]["schedules"];
  REQUIRE(trials.size() == 2);
  CHECK(trials[0]["schedule"] == "zb-h1");
  CHECK(trials[1]["schedule"] == "1f1b");
  const bool second_wins = trials[1]["iteration_seconds"].get<double>() > 0 &&
                           trials[1]["iteration_seconds"].get<double>() < trials[0]["iteration_seconds"].get<double>();
  CHECK(config["schedule"] == trials[second_wins ? 1 : 0]["schedule"]);
  CHECK(seconds == trials[second_wins ? 1 : 0]["iteration_seconds"].get<double>());
  CHECK(seconds > 0);
  CHECK(plan["samples_per_second"].get<double>() == Approx(64 / seconds));
  CHECK(plan["ideal_seconds"].get<double>() <= seconds);
  CHECK(plan["memory_gib"].size() ==
        config["encoder"]["pp"].get<std::size_t>() + config["llm"]["pp"].get<std::size_t>());
  // Where the first sampled batch's GPU time goes: shares adding up to 1; its ops
  // hold at least the ideal's work (the ideal is the sampled batches' mean).
  const auto& shares = plan["time_breakdown"];
  REQUIRE(shares.is_object());
  const double ops = shares["ops"].get<double>(), sync = shares["gradient_sync"].get<double>(),
               idle = shares["idle"].get<double>();
  CHECK(ops + sync + idle == Approx(1));
  CHECK(ops > 0);
  CHECK(sync >= 0);
  CHECK(idle >= 0);
  const double batch_seconds = shares["iteration_seconds"].get<double>();
  CHECK(batch_seconds > 0);
  CHECK(ops * batch_seconds >= 0.8 * plan["ideal_seconds"].get<double>());
  for (const char* method : {"data_blind", "dflop_reference"}) {
    INFO(method);
    const auto& baseline = plan["baselines"][method];
    REQUIRE(baseline.is_object());
    CHECK(baseline["config"].contains("encoder"));
    CHECK(baseline["config"]["schedule"] == config["schedule"]);  // methods are compared on one schedule
    CHECK(baseline["iteration_seconds"].get<double>() >= seconds * (1 - 1e-12));
  }
}

TEST_CASE("plan prints the side-by-side table and writes a trace", "[plan][cli]") {
  const std::string trace = std::string(DFLOP_TEST_SCRATCH_DIR) + "/plan_trace.json";
  const auto result = run_cli("plan" + small_case + " --trace '" + trace + "'", "plan_text");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  for (const char* row : {"data_blind", "dflop_reference", "dflop ", "ideal", "where the GPU time goes"})
    CHECK_THAT(result.out, Catch::Contains(row));
  std::ifstream file(trace);
  REQUIRE(file.good());
  const auto events = nlohmann::json::parse(file);
  CHECK(!events["traceEvents"].empty());
}

TEST_CASE("plan rejects bad input with exit status 2 and says what was wrong", "[plan][cli]") {
  const auto unknown_model = run_cli("plan --model nope+qwen2.5-7b --gpus 16", "plan_bad_model");
  CHECK(unknown_model.exit_code == 2);
  CHECK_THAT(unknown_model.err, Catch::Contains("nope"));
  const auto bad_gpus = run_cli("plan --gpus 12 --gpus-per-node 8", "plan_bad_gpus");
  CHECK(bad_gpus.exit_code == 2);
  CHECK_THAT(bad_gpus.err, Catch::Contains("dflop: error: --gpus: 12 GPUs do not fill whole nodes of 8"));
  // The library names the parameter (planner_options::global_batch); the tool, the flag.
  const auto no_batch = run_cli("plan --global-batch 0", "plan_zero_batch");
  CHECK(no_batch.exit_code == 2);
  CHECK_THAT(no_batch.err, Catch::Contains("dflop: error: --global-batch: must be at least 1, got 0"));
  const auto missing = run_cli("plan --workload '" + std::string(DFLOP_TEST_SCRATCH_DIR) + "/missing.jsonl'",
                               "plan_missing");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("missing.jsonl"));
  const auto bad_line = write_scratch_file("plan_bad.jsonl", "{\"id\": \"a\", \"modality\": \"text\"}\n");
  const auto malformed = run_cli("plan --workload '" + bad_line + "'" + small_case, "plan_malformed");
  CHECK(malformed.exit_code == 2);
  CHECK_THAT(malformed.err, Catch::Contains("plan_bad.jsonl:1"));
}

TEST_CASE("plan stops on a sample no configuration holds, and plans without it when asked", "[plan][cli]") {
  // The issue's case: 600 samples, one of them with 10^15 LLM tokens.
  const std::string trace =
      std::string(DFLOP_TEST_SCRATCH_DIR) + "/plan_giant_" + std::to_string(::getpid()) + ".jsonl";
  REQUIRE(run_cli("generate --mixture onevision --samples 600 --seed 3 --output '" + trace + "'", "giant_gen")
              .exit_code == 0);
  {
    std::ofstream(trace, std::ios::app)
        << R"({"id":"giant","modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":1000000000000000})"
        << "\n";
  }
  const std::string args = "plan --workload '" + trace + "'" + small_case;
  const auto refused = run_cli(args, "plan_giant");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains(trace + ": 1 sample cannot fit in memory under any configuration"));
  CHECK_THAT(refused.err, Catch::Contains("giant (0 encoder, 1000000000000000 LLM tokens)"));
  CHECK_THAT(refused.err, Catch::Contains("--exclude-unfittable FILE"));

  const std::string ids = trace + ".excluded";
  const auto planned = run_cli(args + " --json --exclude-unfittable '" + ids + "'", "plan_giant_excluded");
  INFO(planned.err);
  REQUIRE(planned.exit_code == 0);
  CHECK(nlohmann::json::parse(planned.out)["excluded_samples"] == nlohmann::json::array({"giant"}));
  std::ifstream written(ids);
  std::string line, all;
  while (std::getline(written, line)) all += line + ";";
  CHECK(all == "giant;");
}
