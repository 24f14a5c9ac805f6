// SPDX-License-Identifier: Apache-2.0
// with_run_ahead: the encoder's positions run forwards further ahead, against a
// hand-built 1F1B with deeper warm-ups, and its invariants on random shapes of
// every one-chunk schedule: still complete and deadlock-free, the same ops in
// the same relative order, peaks raised by exactly the run-ahead (up to m).
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule.hpp>
#include <dflop/schedule/run_ahead.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace dflop;

namespace {

//! 1F1B's op list for `rank` with `warm` warm-up forwards (at most m), written out.
std::vector<pipeline_op> one_f_one_b_with_warmup(std::uint32_t rank, std::uint32_t m, std::uint32_t warm) {
  warm = std::min(warm, m);
  std::vector<pipeline_op> ops;
  for (std::uint32_t j = 0; j < warm; ++j) ops.push_back({op_kind::forward, j, rank, 0});
  for (std::uint32_t j = warm; j < m; ++j) {
    ops.push_back({op_kind::forward, j, rank, 0});
    ops.push_back({op_kind::backward, j - warm, rank, 0});
  }
  for (std::uint32_t j = m - warm; j < m; ++j) ops.push_back({op_kind::backward, j, rank, 0});
  return ops;
}

std::vector<pipeline_op> only(const std::vector<pipeline_op>& ops, bool forwards) {
  std::vector<pipeline_op> kept;
  for (const auto& op : ops)
    if ((op.kind == op_kind::forward) == forwards) kept.push_back(op);
  return kept;
}

}  // namespace

TEST_CASE("run-ahead on 1F1B is 1F1B with run-ahead more warm-up forwards on the first positions", "[schedule]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const auto ranks = std::uniform_int_distribution<std::uint32_t>(1, 8)(rng);
    const auto m = std::uniform_int_distribution<std::uint32_t>(1, 20)(rng);
    const auto positions = std::uniform_int_distribution<std::uint32_t>(0, ranks)(rng);
    const auto extra = std::uniform_int_distribution<std::uint32_t>(0, 12)(rng);
    const auto plain = one_f_one_b{}.make({ranks, m});
    const auto ahead = with_run_ahead(plain, positions, extra);
    INFO("S=" << ranks << " m=" << m << " positions=" << positions << " extra=" << extra);
    for (std::uint32_t p = 0; p < ranks; ++p) {
      INFO("rank " << p);
      if (p < positions)
        CHECK(ahead.rank_ops[p] == one_f_one_b_with_warmup(p, m, ranks - 1 - p + extra));
      else
        CHECK(ahead.rank_ops[p] == plain.rank_ops[p]);
    }
  }
}

TEST_CASE("run-ahead keeps every schedule valid, its ops and their order, and raises peaks by the run-ahead",
          "[schedule]") {
  std::mt19937 rng(11);
  for (const std::string name : {"1f1b", "zb-h1", "gpipe"}) {
    for (int trial = 0; trial < 200; ++trial) {
      const auto ranks = std::uniform_int_distribution<std::uint32_t>(1, 9)(rng);
      const auto m = std::uniform_int_distribution<std::uint32_t>(1, 24)(rng);
      const auto positions = std::uniform_int_distribution<std::uint32_t>(0, ranks)(rng);
      const auto extra = std::uniform_int_distribution<std::uint32_t>(0, 30)(rng);
      const auto plain = make_schedule(name, {ranks, m});
      const auto ahead = with_run_ahead(plain, positions, extra);
      INFO(name << " S=" << ranks << " m=" << m << " positions=" << positions << " extra=" << extra);
      REQUIRE_NOTHROW(validate(ahead));
      CHECK(ahead.name == plain.name);
      const auto old_peaks = peak_activations(plain);
      const auto new_peaks = peak_activations(ahead);
      for (std::uint32_t p = 0; p < ranks; ++p) {
        INFO("rank " << p);
        CHECK(only(ahead.rank_ops[p], true) == only(plain.rank_ops[p], true));
        CHECK(only(ahead.rank_ops[p], false) == only(plain.rank_ops[p], false));
        CHECK(new_peaks[p] == (p < positions ? std::min(m, old_peaks[p] + extra) : old_peaks[p]));
      }
    }
  }
}

TEST_CASE("run-ahead of nothing is the schedule itself; bad requests are refused", "[schedule]") {
  const auto plain = zero_bubble_h1{}.make({4, 6});
  CHECK(with_run_ahead(plain, 2, 0).rank_ops == plain.rank_ops);
  CHECK(with_run_ahead(plain, 0, 5).rank_ops == plain.rank_ops);
  CHECK_THROWS_WITH(with_run_ahead(plain, 5, 1),
                    "with_run_ahead: 5 positions asked of schedule 'zb-h1', which has 4 ranks");
  CHECK_THROWS_WITH(with_run_ahead(interleaved_1f1b{2}.make({2, 4}), 1, 1),
                    Catch::Contains("has 2 chunks; run-ahead applies to one-chunk schedules"));
}

TEST_CASE("a plan layout runs the configuration's encoder run-ahead on the encoder's positions", "[schedule][plan]") {
  parallel_config config;
  config.encoder = {1, 2, 1};
  config.llm = {1, 3, 1};
  config.microbatches = 8;
  config.encoder_run_ahead = 3;
  const auto layout = make_plan_layout(config, {}, {}, zero_bubble_h1{});
  const auto expected = with_run_ahead(zero_bubble_h1{}.make({5, 8}), 2, 3);
  CHECK(layout.schedule.rank_ops == expected.rank_ops);
  CHECK(peak_activations(layout.schedule) == std::vector<std::uint32_t>{8, 7, 3, 2, 1});

  config.encoder_run_ahead = -1;
  CHECK_THROWS_WITH(make_plan_layout(config, {}, {}, zero_bubble_h1{}),
                    Catch::Contains("parallel_config::encoder_run_ahead") && Catch::Contains("got -1"));
  config.encoder = {1, 0, 1};
  config.encoder_run_ahead = 2;
  CHECK_THROWS_WITH(make_plan_layout(config, {}, {}, zero_bubble_h1{}), Catch::Contains("without an encoder"));
}
