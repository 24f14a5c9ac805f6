// SPDX-License-Identifier: Apache-2.0
// `dflop plan --save` and `dflop schedule`: a saved plan schedules batches drawn
// from a workload (every sample of a batch in exactly one LLM microbatch, encoder
// parts only with samples that have encoder work), reproducibly for a seed, with
// the planner's own prediction on the batches it scored; hand-edited plans that
// cannot run exit with status 2 and say why.
#include "cli_support.hpp"

#include <dflop/workload/sample.hpp>
#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using dflop::test::run_cli;
using dflop::test::write_scratch_file;

namespace {

// Per process: ctest runs each test case as its own process, in parallel, and
// each makes these files once; shared names would be written while read.
const std::string scratch = std::string(DFLOP_TEST_SCRATCH_DIR) + "/schedule_" + std::to_string(::getpid());
const std::string trace_path = scratch + "_workload.jsonl";
const std::string plan_path = scratch + "_plan.json";

//! Writes a 300-sample trace and plans 16 GPUs for it once; returns the plan as saved.
const nlohmann::json& saved_plan() {
  static const nlohmann::json plan = [] {
    const auto made = run_cli("generate --mixture onevision --samples 300 --seed 4 --output '" + trace_path + "'",
                              "schedule_gen");
    REQUIRE(made.exit_code == 0);
    const auto planned = run_cli("plan --workload '" + trace_path +
                                     "' --model siglip-400m+qwen2.5-7b --gpus 16 --gpus-per-node 8 --gpu h100-80gb"
                                     " --global-batch 64 --batches 2 --seed 1 --json --save '" + plan_path + "'",
                                 "schedule_plan");
    INFO(planned.err);
    REQUIRE(planned.exit_code == 0);
    std::ifstream file(plan_path);
    REQUIRE(file.good());
    return nlohmann::json::parse(file);
  }();
  return plan;
}

//! The JSON Lines `schedule --json ARGS` prints, one object per batch.
std::vector<nlohmann::json> schedule_json(const std::string& args, const std::string& tag) {
  const auto result = run_cli("schedule --plan '" + plan_path + "' --workload '" + trace_path + "' --json " + args, tag);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  std::vector<nlohmann::json> batches;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) batches.push_back(nlohmann::json::parse(line));
  return batches;
}

//! `dflop schedule` on the saved plan edited by `edit`.
dflop::test::cli_result schedule_edited(void (*edit)(nlohmann::json&), const std::string& tag) {
  nlohmann::json plan = saved_plan();
  edit(plan);
  const std::string path = write_scratch_file(tag + ".json", plan.dump(2));
  return run_cli("schedule --plan '" + path + "' --workload '" + trace_path + "'", tag);
}

}  // namespace

TEST_CASE("plan --save writes a self-contained plan file", "[schedule][cli]") {
  const auto& plan = saved_plan();
  CHECK(plan["plan_version"] == 1);
  CHECK(plan["model_spec"]["llm"]["layers"] == 28);
  CHECK(plan["cluster"]["gpu_spec"]["memory_gib"] == 80);
  CHECK(plan["batch"]["order"] == "neh");
  CHECK(plan["seed"] == 1);
  for (const char* method : {"data_blind", "dflop_reference"})
    CHECK(plan["baselines"][method]["config"]["llm"].contains("layers"));
}

TEST_CASE("schedule --json puts every sample of a batch in one LLM microbatch", "[schedule][cli]") {
  const auto& plan = saved_plan();
  std::map<std::string, dflop::sample> by_id;
  for (const auto& s : dflop::read_trace_file(trace_path)) by_id[s.id] = s;
  const auto batches = schedule_json("--batches 3 --seed 9", "schedule_json");
  REQUIRE(batches.size() == 3);
  const int llm_dp = plan["config"]["llm"]["dp"];
  const int encoder_dp = plan["config"]["encoder"]["dp"];
  const int m = plan["config"]["microbatches"];
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const auto& batch = batches[k];
    INFO("batch " << k);
    CHECK(batch["batch"] == k);
    CHECK(batch["seed"] == 9 + k);
    CHECK(batch["predicted_seconds"].get<double>() > 0);
    REQUIRE(batch["samples"].size() == 64);
    std::map<std::string, int> drawn, in_llm, in_encoder;
    for (const auto& id : batch["samples"]) ++drawn[id.get<std::string>()];
    REQUIRE(batch["llm_microbatches"].size() == static_cast<std::size_t>(llm_dp));
    for (const auto& replica : batch["llm_microbatches"]) {
      REQUIRE(replica.size() == static_cast<std::size_t>(m));
      for (const auto& microbatch : replica) {
        CHECK(!microbatch.empty());
        for (const auto& id : microbatch) ++in_llm[id.get<std::string>()];
      }
    }
    CHECK(in_llm == drawn);  // each drawn sample once (the batch draws without replacement)
    for (const auto& [id, count] : drawn) CHECK(count == 1);
    REQUIRE(batch["encoder_parts"].size() == static_cast<std::size_t>(encoder_dp));
    for (const auto& replica : batch["encoder_parts"]) {
      REQUIRE(replica.size() == static_cast<std::size_t>(m));
      for (const auto& part : replica)
        for (const auto& id : part) ++in_encoder[id.get<std::string>()];
    }
    for (const auto& [id, count] : drawn) {
      INFO(id);
      CHECK(in_encoder[id] == (by_id.at(id).encoder_tokens > 0 ? 1 : 0));
    }
    std::vector<int> order = batch["slot_order"];
    std::sort(order.begin(), order.end());
    for (int slot = 0; slot < m; ++slot) CHECK(order[static_cast<std::size_t>(slot)] == slot);
    REQUIRE(batch["memory_gib"].size() == plan["memory_gib"].size());
    for (const auto& stage : batch["memory_gib"]) CHECK(stage["gib"].get<double>() > 0);
  }
}

TEST_CASE("schedule is reproducible for a seed and reproduces the plan's prediction", "[schedule][cli]") {
  const auto& plan = saved_plan();
  const auto first = schedule_json("--batches 2 --seed 5", "schedule_seed_a");
  const auto again = schedule_json("--batches 2 --seed 5", "schedule_seed_b");
  const auto other = schedule_json("--batches 2 --seed 6", "schedule_seed_c");
  CHECK(first == again);
  CHECK(first[0]["samples"] != other[0]["samples"]);
  // Defaults: the plan's seed and batch count, which on the planned workload are the batches it scored.
  const auto scored = schedule_json("", "schedule_scored");
  REQUIRE(scored.size() == plan["batches"].get<std::size_t>());
  double mean = 0;
  for (const auto& batch : scored) mean += batch["predicted_seconds"].get<double>() / static_cast<double>(scored.size());
  CHECK(mean == Approx(plan["iteration_seconds"].get<double>()).epsilon(1e-9));
}

TEST_CASE("schedule --method schedules a baseline's configuration as that method runs it", "[schedule][cli]") {
  const auto& plan = saved_plan();
  for (const char* method : {"data_blind", "dflop_reference"}) {
    INFO(method);
    const auto& baseline = plan["baselines"][method];
    const auto scored = schedule_json(std::string("--method ") + method, std::string("schedule_") + method);
    REQUIRE(scored.size() == plan["batches"].get<std::size_t>());
    double mean = 0;
    for (const auto& batch : scored) {
      CHECK(batch["method"] == method);
      const auto replicas = baseline["config"]["llm"]["dp"].get<std::size_t>();
      CHECK(batch["llm_microbatches"].size() == replicas);
      // Arrival order: slot k runs k-th.
      for (std::size_t j = 0; j < batch["slot_order"].size(); ++j) CHECK(batch["slot_order"][j] == j);
      mean += batch["predicted_seconds"].get<double>() / static_cast<double>(scored.size());
    }
    // On the batches the planner scored, the same prediction as the plan's baseline figure.
    CHECK(mean == Approx(baseline["iteration_seconds"].get<double>()).epsilon(1e-9));
  }
  const auto unknown = run_cli("schedule --plan '" + plan_path + "' --method megatron", "schedule_unknown_method");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("no method 'megatron'"));
}

TEST_CASE("schedule prints a readable summary without --json", "[schedule][cli]") {
  saved_plan();
  const auto result = run_cli("schedule --plan '" + plan_path + "' --workload '" + trace_path + "' --batches 1",
                              "schedule_text");
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  for (const char* text : {"batch 0", "llm replica 0:", "encoder replica 0:", "slot order:", "llm stage 0:",
                           "mean predicted iteration"})
    CHECK_THAT(result.out, Catch::Contains(text));
}

TEST_CASE("schedule rejects a hand-edited plan that cannot run with exit status 2", "[schedule][cli]") {
  saved_plan();
  const auto degrees = schedule_edited(
      [](nlohmann::json& plan) { plan["config"]["llm"]["dp"] = plan["config"]["llm"]["dp"].get<int>() + 1; },
      "schedule_bad_degrees");
  CHECK(degrees.exit_code == 2);
  CHECK_THAT(degrees.err, Catch::Contains("field 'config'") && Catch::Contains("but cluster.gpus is 16"));
  CHECK(degrees.out.empty());

  const auto gap = schedule_edited(
      [](nlohmann::json& plan) {
        auto& llm = plan["config"]["llm"];
        llm["pp"] = 2;
        llm["layers"] = {{0, 10}, {12, 28}};
      },
      "schedule_gap");
  CHECK(gap.exit_code == 2);
  CHECK_THAT(gap.err, Catch::Contains("schedule_gap.json: field 'config.llm.layers[1]': ") &&
                          Catch::Contains("a gap (layers 10 to 11 are on no stage)"));

  const auto missing = run_cli("schedule --plan /nonexistent/plan.json", "schedule_missing");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("/nonexistent/plan.json: cannot open file for reading"));
}

TEST_CASE("schedule keeps the plan's memory budget: a batch it cannot fit stops with its samples named",
          "[schedule][cli][memory]") {
  const nlohmann::json& plan = saved_plan();
  CHECK(plan["batch"]["memory_budget_bytes"].get<std::int64_t>() == static_cast<std::int64_t>(80.0 * 0.9 * (1 << 30)));
  CHECK(plan["memory_cap"]["batches"] == 128);
  // A budget a few bytes above the weights and optimizer states: no sample fits.
  const auto starved = schedule_edited(
      [](nlohmann::json& edited) {
        std::int64_t fixed = 0;
        for (const auto& stage : edited["memory_gib"]) {
          const auto& bytes = stage["bytes"];
          fixed = std::max(fixed, bytes["parameters"].get<std::int64_t>() + bytes["gradients"].get<std::int64_t>() +
                                      bytes["optimizer_states"].get<std::int64_t>());
        }
        edited["batch"]["memory_budget_bytes"] = fixed + 1024;
      },
      "schedule_starved");
  CHECK(starved.exit_code == 1);
  CHECK_THAT(starved.err, Catch::Contains("cannot fit in memory even alone") && Catch::Contains("budget per GPU"));
  CHECK(starved.out.find("batch 0") == std::string::npos);  // the header, no batch
}

TEST_CASE("schedule --json says how many layers each stage recomputes per microbatch where the plan recomputes",
          "[schedule][cli]") {
  // The saved plan with LLM recomputation turned on (all layers): on 80 GB
  // GPUs no batch needs any of it, unless every batch keeps the plan's count.
  for (const bool planned : {false, true}) {
    nlohmann::json plan = saved_plan();
    plan["config"]["llm"]["recompute"] = true;
    if (planned) plan["batch"]["recompute_per_batch"] = false;
    const std::string path = write_scratch_file(planned ? "recompute_planned.json" : "recompute_per_batch.json",
                                                plan.dump(2));
    const auto result = run_cli("schedule --plan '" + path + "' --workload '" + trace_path + "' --json --batches 2",
                                planned ? "schedule_planned" : "schedule_per_batch");
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    const auto& llm = plan["config"]["llm"];
    const int m = plan["config"]["microbatches"];
    std::istringstream lines(result.out);
    std::size_t batches = 0;
    for (std::string line; std::getline(lines, line); ++batches) {
      const auto batch = nlohmann::json::parse(line);
      CHECK(batch.contains("encoder_recomputed") == plan["config"]["encoder"]["recompute"].get<bool>());
      REQUIRE(batch.contains("llm_recomputed"));
      const auto& counts = batch["llm_recomputed"];
      REQUIRE(counts.size() == llm["dp"].get<std::size_t>());
      for (const auto& replica : counts) {
        REQUIRE(replica.size() == static_cast<std::size_t>(m));
        for (const auto& microbatch : replica) {
          REQUIRE(microbatch.size() == llm["pp"].get<std::size_t>());
          for (std::size_t s = 0; s < microbatch.size(); ++s) {
            const int layers = llm["layers"][s][1].get<int>() - llm["layers"][s][0].get<int>();
            CHECK(microbatch[s].get<int>() == (planned ? layers : 0));
          }
        }
      }
    }
    CHECK(batches == 2);
  }
}
