// SPDX-License-Identifier: Apache-2.0
#include "cli_support.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>

using dflop::test::run_cli;
using dflop::test::write_scratch_file;

namespace {
const std::string costs_csv =
    "id,encoder,llm\n"
    "a,4,1\n"
    "b,0,3\n"
    "c,2,2\n"
    "d,1,4\n"
    "e,3,0\n"
    "f,2,2\n";
}  // namespace

TEST_CASE("dflop pack --json prints every sample once in K bins", "[pack][cli]") {
  const auto path = write_scratch_file("pack_costs.csv", costs_csv);
  for (const std::string packer : {"sequential", "lpt", "karmarkar_karp", "refined", "exact"}) {
    const auto result = run_cli("pack --costs '" + path + "' --bins 3 --packer " + packer + " --seed 4 --json", "pack_json");
    CAPTURE(packer, result.err);
    REQUIRE(result.exit_code == 0);
    const auto out = nlohmann::json::parse(result.out);
    CHECK(out["packer"] == packer);
    REQUIRE(out["bins"].size() == 3);
    std::multiset<std::string> ids;
    for (const auto& bin : out["bins"]) {
      CHECK_FALSE(bin.empty());
      for (const auto& id : bin) ids.insert(id.get<std::string>());
    }
    CHECK(ids == std::multiset<std::string>{"a", "b", "c", "d", "e", "f"});
    CHECK(out["makespan"].get<double>() >= out["lower_bound"].get<double>());
    CHECK(out["lower_bound"].get<double>() == 4.0);  // total 12 / 3 bins, and the largest cost
    CHECK(out["seconds"].get<double>() >= 0);
    if (packer == "exact" || packer == "refined") CHECK(out["makespan"].get<double>() == 4.0);
  }
}

TEST_CASE("dflop pack prints a readable summary by default", "[pack][cli]") {
  const auto path = write_scratch_file("pack_costs_text.csv", costs_csv);
  const auto result = run_cli("pack --costs '" + path + "' --bins 2", "pack_text");
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("packer       refined") != std::string::npos);
  CHECK(result.out.find("bin 1:") != std::string::npos);
}

TEST_CASE("dflop pack rejects bad input with exit status 2 and the line", "[pack][cli]") {
  struct bad_case {
    std::string name, content, bins, message;
  };
  const bad_case cases[] = {
      {"pack_few.csv", "id,x\na,1\nb,2\n", "3", "2 samples cannot fill 3 bins"},
      {"pack_text.csv", "id,x\na,1\nb,oops\n", "1", ":3: column 'x': 'oops' is not a finite number"},
      {"pack_negative.csv", "id,x\na,1\nb,-2\n", "1", ":3: column 'x': negative value -2"},
      {"pack_no_id.csv", "name,x\na,1\n", "1", ":1: missing column 'id'"},
      {"pack_no_costs.csv", "id\na\n", "1", ":1: no cost columns"},
      {"pack_duplicate.csv", "id,x\na,1\nb,2\na,3\n", "1", ":4: duplicate id 'a' (first on line 2)"},
      {"pack_short.csv", "id,x,y\na,1,2\nb,2\n", "1", ":3: expected 3 fields"},
      {"pack_zero.csv", "id,x\na,1\n", "0", "the number of bins must be at least 1"},
  };
  for (const auto& bad : cases) {
    const auto path = write_scratch_file(bad.name, bad.content);
    const auto result = run_cli("pack --costs '" + path + "' --bins " + bad.bins + " --json", "pack_bad");
    CAPTURE(bad.name, result.err);
    CHECK(result.exit_code == 2);
    CHECK(result.err.find(bad.message) != std::string::npos);
    CHECK(result.out.empty());
  }
  CHECK(run_cli("pack --costs /nonexistent/costs.csv --bins 2", "pack_missing").exit_code == 2);
  const auto path = write_scratch_file("pack_ok.csv", costs_csv);
  CHECK(run_cli("pack --costs '" + path + "' --bins 2 --packer magic", "pack_unknown").exit_code == 2);
}
