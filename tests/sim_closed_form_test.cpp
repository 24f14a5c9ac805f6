// SPDX-License-Identifier: Apache-2.0
// With uniform costs the simulator reproduces the published closed forms.
#include <dflop/schedule.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/pipeline_simulator.hpp>

#include <catch2/catch.hpp>

using namespace dflop;

TEST_CASE("GPipe and 1F1B take (m + S - 1)(f + b) with uniform costs", "[sim]") {
  pipeline_simulator simulator;
  simulation_result result;
  const double f = 1.25;
  const double b = 2.5;
  for (std::uint32_t stages = 1; stages <= 8; ++stages)
    for (std::uint32_t m = 1; m <= 32; ++m) {
      const auto costs = pipeline_costs::uniform(m, stages, f, b);
      const double expected = (m + stages - 1) * (f + b);
      for (const auto& s : {gpipe{}.make({stages, m}), one_f_one_b{}.make({stages, m})}) {
        INFO(s.name << " S=" << stages << " m=" << m);
        simulator.simulate(s, costs, result);
        REQUIRE(result.makespan == Approx(expected));
        REQUIRE(result.bubble_fraction == Approx((stages - 1.0) / (m + stages - 1.0)).margin(1e-12));
        for (double busy : result.busy) REQUIRE(busy == Approx(m * (f + b)));
      }
    }
}

TEST_CASE("a weight time is part of the backward when the schedule does not split it", "[sim]") {
  const auto costs = pipeline_costs::uniform(6, 3, 1.0, 1.0, 0.5);
  CHECK(simulate(one_f_one_b{}.make({3, 6}), costs).makespan == Approx((6 + 3 - 1) * 2.5));
}

TEST_CASE("interleaved 1F1B matches its bubble formula (S-1)/(v m)", "[sim]") {
  const double f = 1.0;
  const double b = 2.0;
  for (std::uint32_t stages = 1; stages <= 8; ++stages)
    for (std::uint32_t v = 1; v <= 4; ++v)
      for (std::uint32_t m = stages; m <= 32; m += stages) {
        INFO("S=" << stages << " v=" << v << " m=" << m);
        // Per-rank time f, b split over v chunks: each chunk costs f/v, b/v.
        const auto costs = spread_over_chunks(pipeline_costs::uniform(m, stages, f, b), v);
        const auto result = simulate(interleaved_1f1b{v}.make({stages, m}), costs);
        const double ideal = m * (f + b);
        REQUIRE((result.makespan - ideal) / ideal == Approx((stages - 1.0) / (v * m)).margin(1e-12));
      }
}

TEST_CASE("ZB-H1's bubble is a third of 1F1B's at equal memory (F = B = W)", "[sim]") {
  for (std::uint32_t stages = 2; stages <= 8; ++stages)
    for (std::uint32_t m = stages; m <= 32; ++m) {
      INFO("S=" << stages << " m=" << m);
      const auto costs = pipeline_costs::uniform(m, stages, 1.0, 1.0, 1.0);
      const auto zero = zero_bubble_h1{}.make({stages, m});
      const auto one = one_f_one_b{}.make({stages, m});
      const double ideal = 3.0 * m;
      const double zero_bubble = simulate(zero, costs).makespan - ideal;
      const double one_bubble = simulate(one, costs).makespan - ideal;
      REQUIRE(one_bubble == Approx(3.0 * (stages - 1)));
      REQUIRE(zero_bubble == Approx(stages - 1.0));  // (S-1)(F+B-2W)
      REQUIRE(peak_activations(zero) == peak_activations(one));
    }
}

TEST_CASE("transfers delay every hop between ranks", "[sim]") {
  // 1F1B, one microbatch: the op chain crosses 2(S-1) hops.
  const std::uint32_t stages = 4;
  const auto costs = pipeline_costs::uniform(1, stages, 1.0, 2.0, 0.0, 0.25);
  CHECK(simulate(one_f_one_b{}.make({stages, 1}), costs).makespan == Approx(4 * 3.0 + 2 * 3 * 0.25));
  // With one rank and two chunks, the hop between chunks stays on the rank: free.
  const auto local = spread_over_chunks(pipeline_costs::uniform(1, 1, 1.0, 2.0, 0.0, 0.25), 2);
  CHECK(simulate(interleaved_1f1b{2}.make({1, 1}), local).makespan == Approx(3.0));
}
