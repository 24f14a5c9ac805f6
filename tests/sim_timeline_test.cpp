// SPDX-License-Identifier: Apache-2.0
// Timeline export: the terminal drawing and the Chrome trace event JSON.
#include <dflop/schedule.hpp>
#include <dflop/sim/chrome_trace.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/text_timeline.hpp>

#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>

using namespace dflop;

TEST_CASE("text timeline: one line per rank, one character per bucket", "[sim]") {
  // 1F1B, S = 2, m = 1, f = b = 1: stage 0 F [0,1) B [3,4); stage 1 F [1,2) B [2,3).
  const auto s = one_f_one_b{}.make({2, 1});
  const auto result = simulate(s, pipeline_costs::uniform(1, 2, 1, 1));
  const auto text = render_text_timeline(make_timeline(s, result), 8);
  CHECK(text ==
        "stage 0 |FF....BB|\n"
        "stage 1 |..FFBB..|\n"
        "         0      4\n");
  // A zero-bubble schedule shows its W passes.
  const auto z = zero_bubble_h1{}.make({2, 2});
  const auto zero = render_text_timeline(make_timeline(z, simulate(z, pipeline_costs::uniform(2, 2, 1, 1, 1))), 40);
  CHECK(zero.find('W') != std::string::npos);
}

TEST_CASE("Chrome trace: one X event per op, coloured by kind, microbatch and cost in args", "[sim]") {
  const auto s = zero_bubble_h1{}.make({3, 4});
  auto costs = pipeline_costs::uniform(4, 3, 0.001, 0.002, 0.0015);
  const std::vector<std::uint32_t> order{3, 2, 1, 0};
  const auto result = simulate(s, costs, order);
  const auto trace = chrome_trace(make_timeline(s, result, order));
  REQUIRE(trace.contains("traceEvents"));
  std::size_t complete = 0;
  std::set<std::string> names;
  std::set<std::string> colours;
  std::set<std::uint32_t> tracks;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M") {
      if (event["name"] == "thread_name") CHECK(event["args"]["name"].get<std::string>().rfind("stage ", 0) == 0);
      continue;
    }
    REQUIRE(event["ph"] == "X");
    ++complete;
    names.insert(event["name"].get<std::string>());
    colours.insert(event["cname"].get<std::string>());
    tracks.insert(event["tid"].get<std::uint32_t>());
    CHECK(event["args"].contains("microbatch"));
    CHECK(event["dur"].get<double>() == Approx(event["args"]["cost"].get<double>() * 1e6));
  }
  CHECK(complete == s.op_count());
  CHECK(names.count("F3") == 1);
  CHECK(names.count("B0") == 1);
  CHECK(names.count("W2") == 1);
  CHECK(colours.size() == 3);
  CHECK(tracks == std::set<std::uint32_t>{0, 1, 2});
  // The first forward on stage 0 is microbatch 3 (the order's first entry), at t = 0.
  for (const auto& event : trace["traceEvents"])
    if (event["ph"] == "X" && event["tid"] == 0 && event["ts"] == 0.0) CHECK(event["name"] == "F3");

  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/sim_trace.json";
  write_chrome_trace(make_timeline(s, result, order), path);
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in) == trace);
  CHECK_THROWS_AS(write_chrome_trace(make_timeline(s, result), "/nonexistent-dir/x.json"), input_error);
}
