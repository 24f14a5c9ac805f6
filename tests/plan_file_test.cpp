// SPDX-License-Identifier: Apache-2.0
// Plan files: planner output survives the round trip through a file (same JSON,
// same configuration and layer splits), and every kind of inconsistency a hand
// edit can introduce is rejected with the file, the field's JSON path and why.
#include "error_of.hpp"
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

using dflop::test::error_of;

namespace {

//! Every field of two plans, compared one by one (a plan has no `==`: its search timings are wall times).
void check_same_plan(const dflop::plan& read, const dflop::plan& original) {
  CHECK(read.model == original.model);
  CHECK(read.model_spec == original.model_spec);
  CHECK(read.batch == original.batch);
  CHECK(read.cluster == original.cluster);
  CHECK(read.global_batch == original.global_batch);
  CHECK(read.batches == original.batches);
  CHECK(read.seed == original.seed);
  CHECK(read.schedule == original.schedule);
  CHECK(read.chosen == original.chosen);
  CHECK(read.chosen.config == original.chosen.config);
  CHECK(read.chosen.encoder.first_layer == original.chosen.encoder.first_layer);
  CHECK(read.chosen.llm.first_layer == original.chosen.llm.first_layer);
  CHECK(read.memory == original.memory);
  CHECK(read.ideal_seconds == original.ideal_seconds);
  CHECK(read.baselines == original.baselines);
  CHECK(read.search == original.search);
}

//! A plan made by hand with pipelines of two stages per module, so layer ranges have edges to break:
//! 16 GPUs, 8 per node; encoder tp1 pp2 dp2 (6 layers), LLM tp2 pp2 dp3 (8 layers), 4 microbatches, batch 32.
dflop::plan two_stage_plan() {
  dflop::plan p;
  p.model_spec = dflop::test::small_model();
  p.model = p.model_spec.name;
  p.cluster = dflop::test::small_cluster(16, 8);
  p.global_batch = 32;
  p.batches = 2;
  p.seed = 7;
  p.batch.order = dflop::order_policy::johnson;
  p.batch.assignment = dflop::slot_assignment::balanced;
  p.schedule = "gpipe";
  const auto method = [](dflop::plan_method name, double seconds) {
    dflop::method_result r;
    r.method = name;
    r.config = {{1, 2, 2}, {2, 2, 3, false, true}, 4};
    r.encoder = {r.config.encoder, {0, 3, 6}};
    r.llm = {r.config.llm, {0, 4, 8}};
    r.estimated_seconds = seconds * 0.9;
    r.iteration_seconds = seconds;
    r.peak_memory_gib = 12.5;
    return r;
  };
  p.chosen = method(dflop::plan_method::dflop, 1.25);
  for (int s = 0; s < 4; ++s)
    p.memory.push_back({s < 2 ? dflop::module_kind::encoder : dflop::module_kind::llm, s % 2, 4 - s,
                        {1000 + s, 2000, 3000, std::int64_t{5} << 30}});
  p.ideal_seconds = 0.75;
  p.baselines = {method(dflop::plan_method::data_blind, 2.0), method(dflop::plan_method::dflop_reference, 1.5)};
  p.baselines[1].fits_memory = false;
  p.baselines[1].out_of_memory_attempts = 3;
  return p;
}

//! The message `plan_from_json` gives for `two_stage_plan()` edited by `edit`.
std::string error_after(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json document = dflop::to_json(two_stage_plan());
  edit(document);
  return error_of([&] { (void)dflop::plan_from_json(document, "plan.json"); });
}

//! Asserts that `message` names the file, the field and the reason.
void check_rejected(const std::string& message, const std::string& field, const std::string& reason) {
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith("plan.json: field '" + field + "': "));
  CHECK_THAT(message, Catch::Contains(reason));
}

}  // namespace

TEST_CASE("planner output survives the round trip through a plan file", "[plan][json][file]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const dflop::cluster_spec cluster{16, 8, dflop::find_gpu("h100-80gb")};
  dflop::planner_options options;
  options.global_batch = 64;
  options.batches = 2;
  options.seed = 1;
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
      model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), options);
  const dflop::plan original = planner.make_plan(dflop::test::small_workload(400, 3));
  REQUIRE(original.baselines.size() == 2);

  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/plan_file_round_trip.json";
  dflop::write_plan(path, original);
  const dflop::plan read = dflop::read_plan(path);
  CHECK(dflop::to_json(read) == dflop::to_json(original));
  check_same_plan(read, original);
  // The file is self-contained: a custom GPU and model shapes come back as they were.
  CHECK(read.cluster.gpu == dflop::find_gpu("h100-80gb"));
}

TEST_CASE("a custom model, GPU and per-batch options round-trip exactly", "[plan][json][file]") {
  dflop::plan p = two_stage_plan();
  p.cluster.gpu = {"odd-gpu", 123.456e12, (std::int64_t{47} << 30) + 512, 333.3e9, 12.5e9, 7.5e-6};
  p.model_spec.llm.tied_embeddings = true;
  p.batch.seed = 18446744073709551615ULL;
  p.batch.order_budget = 3;
  p.batch.weight_gradient_share = 0.375;
  p.batch.gradient_bucket_bytes = 25.5 * (1 << 20);
  p.chosen.config.encoder_run_ahead = 3;
  const auto document = dflop::to_json(p);
  CHECK(document["batch"]["gradient_bucket_bytes"] == 25.5 * (1 << 20));
  CHECK(document["config"]["encoder_run_ahead"] == 3);
  CHECK(!document["baselines"]["data_blind"]["config"].contains("encoder_run_ahead"));  // written only where it runs ahead
  const dflop::plan read = dflop::plan_from_json(document, "plan.json");
  CHECK(dflop::to_json(read) == document);
  check_same_plan(read, p);
  // Read as text too (what read_plan does), with the version marker first.
  CHECK(dflop::to_json(dflop::parse_plan_json(document.dump(2), "plan.json")) == document);
  CHECK(document.begin().key() == "plan_version");
  CHECK(document["plan_version"] == dflop::plan_file_version);
}

TEST_CASE("plan files reject missing, mistyped and unknown fields and other versions", "[plan][json][file]") {
  check_rejected(error_after([](auto& d) { d.erase("global_batch"); }), "global_batch", "missing required field");
  check_rejected(error_after([](auto& d) { d["config"]["microbatches"] = "4"; }), "config.microbatches",
                 "expected an integer >= 1");
  check_rejected(error_after([](auto& d) { d["config"]["llm"]["recompute"] = 1; }), "config.llm.recompute",
                 "expected true or false");
  check_rejected(error_after([](auto& d) { d["config"]["llm"]["layers"] = 2; }), "config.llm.layers",
                 "expected a JSON array");
  check_rejected(error_after([](auto& d) { d["memory_gib"][1]["bytes"].erase("activations"); }),
                 "memory_gib[1].bytes.activations", "missing required field");
  check_rejected(error_after([](auto& d) { d["cluster"]["gpu_spec"]["memory_gib"] = -1; }),
                 "cluster.gpu_spec.memory_gib", "expected a positive number");
  check_rejected(error_after([](auto& d) { d["model_spec"]["llm"]["hidden"] = 0; }), "model_spec.llm.hidden",
                 "expected a positive integer, got 0");
  check_rejected(error_after([](auto& d) { d["model"] = "other"; }), "model", "is not the name in model_spec");
  check_rejected(error_after([](auto& d) { d["config"]["llm"]["pipeline"] = 2; }), "config.llm.pipeline",
                 "unknown field");
  check_rejected(error_after([](auto& d) { d["batch"]["order"] = "fastest"; }), "batch.order",
                 "unknown order policy 'fastest'");
  check_rejected(error_after([](auto& d) { d["batch"]["assignment"] = "random"; }), "batch.assignment",
                 "unknown slot assignment 'random'");
  check_rejected(error_after([](auto& d) { d["batch"]["gradient_bucket_bytes"] = -1; }), "batch.gradient_bucket_bytes",
                 ">= 0");
  check_rejected(error_after([](auto& d) { d["config"]["encoder_run_ahead"] = -1; }), "config.encoder_run_ahead",
                 "expected an integer >= 0");
  check_rejected(error_after([](auto& d) { d["plan_version"] = 2; }), "plan_version",
                 "this dflop reads plan files of version 1, got 2");
  check_rejected(error_after([](auto& d) { d.erase("plan_version"); }), "plan_version", "not a plan file");
  CHECK(error_of([] { (void)dflop::parse_plan_json("{\n\"plan_version\": 1,\n}", "plan.json"); }).starts_with(
      "plan.json:3: invalid JSON"));
  CHECK(error_of([] { (void)dflop::read_plan("/nonexistent/plan.json"); }) ==
        "/nonexistent/plan.json: cannot open file for reading");
}

TEST_CASE("plan files reject degrees that cannot be placed on the cluster", "[plan][json][file]") {
  check_rejected(error_after([](auto& d) { d["config"]["encoder"]["dp"] = 0; }), "config.encoder.dp",
                 "expected an integer >= 1");
  check_rejected(error_after([](auto& d) { d["config"]["llm"]["dp"] = 4; }), "config",
                 "plus llm (2 x 2 x 4 = 16) is 20 GPUs, but cluster.gpus is 16");
  check_rejected(error_after([](auto& d) { d["config"]["llm"]["tp"] = 3; }), "config.llm.tp",
                 "3 does not divide cluster.gpus_per_node (8)");
  check_rejected(error_after([](auto& d) { d["cluster"]["gpus_per_node"] = 4; d["config"]["llm"]["tp"] = 8; }),
                 "config.llm.tp", "8 does not divide cluster.gpus_per_node (4)");
  check_rejected(error_after([](auto& d) {
                   d["config"]["encoder"]["tp"] = 8;  // 12 heads
                 }),
                 "config.encoder.tp", "does not divide the 12 attention heads");
  check_rejected(error_after([](auto& d) { d["cluster"]["gpus"] = 12; }), "cluster.gpus",
                 "12 GPUs do not fill whole nodes of 8");
}

TEST_CASE("plan files reject layer ranges that do not split the module", "[plan][json][file]") {
  const auto ranges = [](nlohmann::json layers) {
    return error_after([&](auto& d) { d["config"]["llm"]["layers"] = layers; });
  };
  check_rejected(ranges({{0, 8}}), "config.llm.layers", "holds 1 layer ranges but pp is 2");
  check_rejected(ranges({{1, 4}, {4, 8}}), "config.llm.layers[0]", "the first stage must start at layer 0");
  check_rejected(ranges({{0, 3}, {4, 8}}), "config.llm.layers[1]", "a gap (layers 3 to 3 are on no stage)");
  check_rejected(ranges({{0, 5}, {4, 8}}), "config.llm.layers[1]", "an overlap (layers 4 to 4 are on two stages)");
  check_rejected(ranges({{0, 4}, {4, 4}}), "config.llm.layers[1]", "stage 1 is empty");
  check_rejected(ranges({{0, 4}, {4, 7}}), "config.llm.layers[1]",
                 "the last stage ends at layer 7 but model_spec.llm has 8 layers");
  check_rejected(ranges({{0, 4}, {4, 9}}), "config.llm.layers[1]", "model_spec.llm has 8 layers");
  check_rejected(ranges({{0, 4}, {-4, 8}}), "config.llm.layers[1]", "expected a layer range [first, end)");
  check_rejected(ranges({{0, 4}, {4}}), "config.llm.layers[1]", "expected a layer range [first, end)");
}

TEST_CASE("plan files reject batch sizes, schedules and methods that cannot run", "[plan][json][file]") {
  check_rejected(error_after([](auto& d) { d["config"]["microbatches"] = 0; }), "config.microbatches",
                 "expected an integer >= 1");
  check_rejected(error_after([](auto& d) { d["config"]["microbatches"] = 11; }), "config.microbatches",
                 "llm dp (3) x microbatches (11) = 33 microbatches, more than global_batch (32)");
  check_rejected(error_after([](auto& d) { d["config"]["schedule"] = "interleaved"; }), "config.schedule",
                 "unknown schedule 'interleaved' (a plan runs a one-chunk schedule: gpipe, 1f1b, zb-h1)");
  check_rejected(error_after([](auto& d) { d["config"]["schedule"] = "2f2b"; }), "config.schedule",
                 "unknown schedule '2f2b'");
  check_rejected(error_after([](auto& d) {
                   d["baselines"]["fastest"] = d["baselines"]["data_blind"];
                   d["baselines"].erase("data_blind");
                 }),
                 "baselines.fastest", "unknown method 'fastest' (known: data_blind, dflop_reference)");
  check_rejected(error_after([](auto& d) { d["memory_gib"].erase(3); }), "memory_gib",
                 "holds 3 stages but config has 4");
  check_rejected(error_after([](auto& d) { d["memory_gib"][2]["module"] = "encoder"; }), "memory_gib[2].module",
                 "expected 'llm'");
}

TEST_CASE("plan files check the baselines' configurations like the chosen one", "[plan][json][file]") {
  check_rejected(error_after([](auto& d) { d["baselines"]["dflop_reference"]["config"]["llm"]["layers"][1][0] = 5; }),
                 "baselines.dflop_reference.config.llm.layers[1]", "a gap (layers 4 to 4 are on no stage)");
  check_rejected(error_after([](auto& d) { d["baselines"]["data_blind"]["config"]["encoder"]["dp"] = 1; }),
                 "baselines.data_blind.config", "is 14 GPUs, but cluster.gpus is 16");
  check_rejected(error_after([](auto& d) { d["baselines"]["data_blind"]["config"]["llm"]["pp"] = 0; }),
                 "baselines.data_blind.config.llm.pp", "expected an integer >= 1");
  check_rejected(error_after([](auto& d) { d["baselines"]["data_blind"]["config"]["microbatches"] = 16; }),
                 "baselines.data_blind.config.microbatches", "more than global_batch (32)");
  check_rejected(error_after([](auto& d) { d["baselines"]["data_blind"]["config"]["schedule"] = "1f1b"; }),
                 "baselines.data_blind.config.schedule", "is not the plan's schedule");
  check_rejected(error_after([](auto& d) { d["baselines"]["data_blind"].erase("fits_memory"); }),
                 "baselines.data_blind.fits_memory", "missing required field");
}
