// SPDX-License-Identifier: Apache-2.0
// Every input the fuzz targets (tests/fuzz) found failing, kept as a test of
// what the reader must say instead: one test case per finding.
#include "error_of.hpp"

#include <dflop/model/model_json.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/sim/costs_csv.hpp>
#include <dflop/workload/trace.hpp>

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

using dflop::test::error_of;

namespace {

// A seed plan of the fuzz corpus, as JSON.
nlohmann::json corpus_plan() {
  std::ifstream in(std::string(DFLOP_TEST_SOURCE_DIR) + "/fuzz/corpus/plan_file/plan16.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("fuzz_trace: a number beyond any number type is bad input on its line, not a JSON library exception",
          "[fuzz]") {
  // Found as "\r999999e599,..."; nlohmann throws out_of_range (406), not parse_error.
  const std::string text = "{\"id\":\"a\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,\"llm_tokens\":5}\n"
                           "{\"id\":\"b\",\"modality\":\"text\",\"encoder_items\":0,\"encoder_tokens\":0,"
                           "\"llm_tokens\":999999e599}\n";
  CHECK(error_of([&] { (void)dflop::read_trace_text(text, "t.jsonl"); }) ==
        "t.jsonl:2: invalid JSON: number overflow parsing '999999e599'");
}

TEST_CASE("fuzz_trace: a JSON file's number overflow names the line the number is on", "[fuzz]") {
  const std::string text = "{\"name\": \"m\",\n \"encoder\": \"siglip-400m\",\n \"llm\": 1e400}\n";
  CHECK(error_of([&] { (void)dflop::parse_model_json(text, "m.json"); }) ==
        "m.json:3: invalid JSON: number overflow parsing '1e400'");
}

TEST_CASE("fuzz_plan_file: a degree of 0 is rejected (non-negative JSON integers were not checked against the minimum)",
          "[fuzz]") {
  // Found as baselines.data_blind.config.encoder.tp = 0: a division by zero further on.
  auto plan = corpus_plan();
  plan["baselines"]["data_blind"]["config"]["encoder"]["tp"] = 0;
  CHECK(error_of([&] { (void)dflop::plan_from_json(plan, "p.json"); }) ==
        "p.json: field 'baselines.data_blind.config.encoder.tp': expected an integer >= 1 and <= 2147483647, got 0");
  plan = corpus_plan();
  plan["global_batch"] = 0;
  CHECK_THAT(error_of([&] { (void)dflop::plan_from_json(plan, "p.json"); }),
             Catch::Contains("field 'global_batch': expected an integer >= 1"));
  // The seed itself reads.
  CHECK(dflop::plan_from_json(corpus_plan(), "p.json").chosen.config.gpus() == 16);
}

TEST_CASE("fuzz_costs_csv: a costs table naming a far microbatch and stage is rejected before anything is allocated",
          "[fuzz]") {
  // Found as two rows, (0, 1) and (77777, 771): it reserved 60 million costs (2.4 GB) before finding the gap.
  const auto table = dflop::read_csv_text("microbatch,stage,forward,backward,weight\n0,01,,2,1\n077777,771,1.,,\n",
                                          "c.csv");
  CHECK(error_of([&] { (void)dflop::read_pipeline_costs(table); }) ==
        "c.csv:3: gap in microbatch numbering: microbatch 1 has no rows (numbers must run 0..77777)");
  // A missing pair is still named with its microbatch's first line.
  const auto missing = dflop::read_csv_text("microbatch,stage,forward,backward\n0,0,1,1\n0,1,1,1\n1,1,1,1\n", "d.csv");
  CHECK(error_of([&] { (void)dflop::read_pipeline_costs(missing); }) == "d.csv:4: microbatch 1 has no row for stage 0");
}
