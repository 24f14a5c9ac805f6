// SPDX-License-Identifier: Apache-2.0
// The multimodal iteration as one graph across replicas, checked against a small
// case worked out by hand: encoder DP 2 (one stage), LLM DP 4 (two stages), m = 2.
#include <dflop/schedule.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/timeline.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <vector>

using namespace dflop;

namespace {

// Encoder: 1 stage, replicas e0 and e1. LLM: 2 stages, replicas r0..r3. m = 2 slots.
// Slot 0: e0 holds samples of r0, r1; e1 of r2, r3.
// Slot 1: e0 holds samples of r0, r1, r2; e1 of r2, r3 (r2 waits for both).
multimodal_costs hand_case() {
  multimodal_costs c;
  c.microbatches = 2;
  c.encoder.stages = 1;
  c.encoder.replicas = 2;
  c.encoder.forward = {2, 1,   // e0: slot 0, slot 1
                       1, 3};  // e1
  c.encoder.backward = {4, 2, 2, 6};
  c.encoder.gradient_bytes = {1e9};
  c.encoder.gradient_link = {1e9, 0.1};  // ring over 2: 2 * 1/2 * 1 s + 0.1 = 1.1
  c.llm.stages = 2;
  c.llm.replicas = 4;
  c.llm.forward.assign(4 * 2 * 2, 1.0);
  c.llm.backward.assign(4 * 2 * 2, 2.0);
  c.llm.forward[c.llm.at(3, 0, 1, 2)] = 3.0;  // r3's microbatch 0 is long on LLM stage 1
  c.llm.gradient_bytes = {2e9, 0};             // stage 0: ring over 4: 2 * 3/4 * 2 s + 0.1 = 3.1
  c.llm.gradient_link = {1e9, 0.1};
  c.handoffs.assign(2 * 2 * 4, handoff{});
  for (auto [e, k, r] : std::vector<std::array<std::uint32_t, 3>>{
           {0, 0, 0}, {0, 0, 1}, {1, 0, 2}, {1, 0, 3}, {0, 1, 0}, {0, 1, 1}, {0, 1, 2}, {1, 1, 2}, {1, 1, 3}})
    c.handoffs[c.handoff_at(e, k, r)] = {true, 0.5};
  return c;
}

}  // namespace

TEST_CASE("multimodal 1F1B with encoder DP 2 and LLM DP 4 matches the hand-built timeline", "[sim]") {
  const auto costs = hand_case();
  // One logical pipeline of 3 positions: encoder, LLM stage 0, LLM stage 1. 1F1B orders:
  //   encoder:     F0 F1 B0 B1
  //   LLM stage 0: F0 F1 B0 B1
  //   LLM stage 1: F0 B0 F1 B1
  const auto s = one_f_one_b{}.make({3, 2});
  const auto result = simulate(s, costs);
  REQUIRE(result.ranks() == 10);  // 1 x 2 encoder + 2 x 4 LLM
  const auto at = [&](std::uint32_t rank, std::size_t i) { return result.rank_timings(rank)[i]; };

  // Encoder forwards: e0 F0 [0,2) F1 [2,3); e1 F0 [0,1) F1 [1,4).
  CHECK(at(costs.encoder_rank(0, 0), 1) == op_timing{2, 3});
  CHECK(at(costs.encoder_rank(0, 1), 1) == op_timing{1, 4});
  // r0 (and r1), fed by e0: LLM s0 F0 at 2 + 0.5 = [2.5,3.5), F1 at 3 + 0.5 = [3.5,4.5).
  // LLM s1: F0 [3.5,4.5) B0 [4.5,6.5) F1 [6.5,7.5) B1 [7.5,9.5); s0: B0 [6.5,8.5) B1 [9.5,11.5).
  for (std::uint32_t r : {0U, 1U}) {
    CHECK(at(costs.llm_rank(0, r), 0) == op_timing{2.5, 3.5});
    CHECK(at(costs.llm_rank(0, r), 1) == op_timing{3.5, 4.5});
    CHECK(at(costs.llm_rank(1, r), 3) == op_timing{7.5, 9.5});
    CHECK(at(costs.llm_rank(0, r), 2) == op_timing{6.5, 8.5});
    CHECK(at(costs.llm_rank(0, r), 3) == op_timing{9.5, 11.5});
  }
  // r2: slot 0 from e1 (1 + 0.5), slot 1 from e0 and e1 (max(3, 4) + 0.5 = 4.5).
  // s0 F0 [1.5,2.5) F1 [4.5,5.5); s1 F0 [2.5,3.5) B0 [3.5,5.5) F1 [5.5,6.5) B1 [6.5,8.5);
  // s0 B0 [5.5,7.5) B1 [8.5,10.5).
  CHECK(at(costs.llm_rank(0, 2), 0) == op_timing{1.5, 2.5});
  CHECK(at(costs.llm_rank(0, 2), 1) == op_timing{4.5, 5.5});
  CHECK(at(costs.llm_rank(1, 2), 2) == op_timing{5.5, 6.5});
  CHECK(at(costs.llm_rank(0, 2), 2) == op_timing{5.5, 7.5});
  CHECK(at(costs.llm_rank(0, 2), 3) == op_timing{8.5, 10.5});
  // r3: from e1 only; its long F0 on s1 is [2.5,5.5), B0 [5.5,7.5), F1 [7.5,8.5), B1 [8.5,10.5);
  // s0 B0 waits for 7.5: [7.5,9.5); B1 for 10.5: [10.5,12.5).
  CHECK(at(costs.llm_rank(1, 3), 0) == op_timing{2.5, 5.5});
  CHECK(at(costs.llm_rank(1, 3), 2) == op_timing{7.5, 8.5});
  CHECK(at(costs.llm_rank(0, 3), 2) == op_timing{7.5, 9.5});
  CHECK(at(costs.llm_rank(0, 3), 3) == op_timing{10.5, 12.5});
  // Encoder backwards wait for the LLM gradients of every replica they fed (+0.5):
  // e0 B0: max(r0 8.5, r1 8.5) + 0.5 = 9 -> [9,13); B1: max(11.5, 11.5, 10.5) + 0.5 = 12, rank busy -> [13,15).
  // e1 B0: max(r2 7.5, r3 9.5) + 0.5 = 10 -> [10,12); B1: max(10.5, 12.5) + 0.5 = 13 -> [13,19).
  CHECK(at(costs.encoder_rank(0, 0), 2) == op_timing{9, 13});
  CHECK(at(costs.encoder_rank(0, 0), 3) == op_timing{13, 15});
  CHECK(at(costs.encoder_rank(0, 1), 2) == op_timing{10, 12});
  CHECK(at(costs.encoder_rank(0, 1), 3) == op_timing{13, 19});
  // Gradient sync: encoder from max(15, 19) = 19 for 1.1; LLM s0 from 12.5 for 3.1; LLM s1 has none.
  CHECK(result.gradient_sync[costs.encoder_rank(0, 0)].start == Approx(19));
  CHECK(result.gradient_sync[costs.encoder_rank(0, 1)].end == Approx(20.1));
  CHECK(result.gradient_sync[costs.llm_rank(0, 2)].start == Approx(12.5));
  CHECK(result.gradient_sync[costs.llm_rank(0, 2)].end == Approx(15.6));
  CHECK(result.gradient_sync[costs.llm_rank(1, 0)].end == Approx(10.5));
  CHECK(result.makespan == Approx(20.1));
  // Busy: e0 9, e1 12, LLM s0 4 x 6, LLM s1 3 x 6 + 8 = 71 over 10 ranks x 20.1.
  CHECK(result.busy[costs.encoder_rank(0, 1)] == Approx(12));
  CHECK(result.busy[costs.llm_rank(1, 3)] == Approx(8));
  CHECK(result.bubble_fraction == Approx(1.0 - 71.0 / 201.0));
  // Peaks follow the logical pipeline's positions: min(3 - p, 2). Ranks in
  // world_layout order: encoder replicas 0, 1, then LLM replica by replica (stage 0, stage 1).
  CHECK(result.peak_activations == std::vector<std::uint32_t>{2, 2, 2, 1, 2, 1, 2, 1, 2, 1});
  const world_layout layout = costs.layout();
  for (std::uint32_t r = 0; r < costs.ranks(); ++r) {
    const rank_role role = layout.role(static_cast<int>(r));
    CHECK(role.position == costs.position_of(r));
    CHECK(role.replica == costs.replica_of(r));
    CHECK(costs.rank_name(r) == std::string(role.encoder() ? "encoder s" : "llm s") + std::to_string(role.stage) +
                                    " r" + std::to_string(role.replica));
  }
}

TEST_CASE("multimodal timeline names ranks and adds the gradient sync", "[sim]") {
  const auto costs = hand_case();
  const auto s = one_f_one_b{}.make({3, 2});
  const auto result = simulate(s, costs);
  const auto line = make_timeline(s, costs, result);
  REQUIRE(line.tracks.size() == 10);
  CHECK(line.tracks[1] == "encoder s0 r1");
  CHECK(line.tracks[9] == "llm s1 r3");
  std::size_t syncs = 0;
  for (const auto& e : line.events) syncs += e.kind == timeline_kind::gradient_sync;
  CHECK(syncs == 2 + 4);  // encoder and LLM stage 0; stage 1 has no gradient bytes
}

TEST_CASE("a multimodal pipeline with one replica each equals the single pipeline", "[sim]") {
  // Encoder 2 stages + LLM 2 stages, DP 1 both, zero hand-off: the same as a 4-stage pipeline.
  const std::uint32_t m = 5;
  multimodal_costs mm;
  mm.microbatches = m;
  mm.encoder = {2, 1, {}, {}, {}, {}, {}, {}, {}};
  mm.llm = {2, 1, {}, {}, {}, {}, {}, {}, {}};
  pipeline_costs single{m, 4, {}, {}, {}, {}};
  for (std::uint32_t j = 0; j < m; ++j)
    for (std::uint32_t s = 0; s < 4; ++s) {
      const double f = 1.0 + j + 0.5 * s;
      const double b = 2.0 + (j * s) % 3;
      single.forward.push_back(f);
      single.backward.push_back(b);
    }
  for (std::uint32_t j = 0; j < m; ++j)
    for (std::uint32_t s = 0; s < 2; ++s) {
      mm.encoder.forward.push_back(single.forward[single.at(j, s)]);
      mm.encoder.backward.push_back(single.backward[single.at(j, s)]);
      mm.llm.forward.push_back(single.forward[single.at(j, s + 2)]);
      mm.llm.backward.push_back(single.backward[single.at(j, s + 2)]);
    }
  mm.handoffs.assign(m, handoff{true, 0.0});
  for (const auto& s : {one_f_one_b{}.make({4, m}), zero_bubble_h1{}.make({4, m}), gpipe{}.make({4, m})}) {
    INFO(s.name);
    const auto a = simulate(s, mm);
    const auto b = simulate(s, single);
    CHECK(a.makespan == Approx(b.makespan));
    CHECK(a.timings == b.timings);
  }
}

TEST_CASE("multimodal input errors are named", "[sim]") {
  auto costs = hand_case();
  const auto s = one_f_one_b{}.make({3, 2});
  costs.handoffs.pop_back();
  CHECK_THROWS_WITH(simulate(s, costs), "multimodal_costs: handoffs has 15 entries, expected 16");
  costs = hand_case();
  costs.llm.backward[3] = -1;
  CHECK_THROWS_WITH(simulate(s, costs), "multimodal_costs: llm.backward has a negative or NaN entry");
  CHECK_THROWS_WITH(simulate(one_f_one_b{}.make({4, 2}), hand_case()), Catch::Contains("costs are for 2 microbatches x 3"));
  CHECK_THROWS_WITH(simulate(interleaved_1f1b{2}.make({3, 3}), hand_case()), Catch::Contains("one-chunk"));
}
