// SPDX-License-Identifier: Apache-2.0
// Where a simulated iteration's GPU time goes (sim/time_breakdown.hpp): closed
// forms on hand-built timelines, the simulator's own busy times on random
// multimodal iterations, and the errors.
#include "error_of.hpp"
#include "sim_test_support.hpp"

#include <dflop/schedule.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/time_breakdown.hpp>
#include <dflop/sim/timeline.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

using namespace dflop;

TEST_CASE("time breakdown: 1F1B on two stages, one microbatch", "[sim]") {
  // Stage 0 F [0,1) B [3,4); stage 1 F [1,2) B [2,3): each busy 2 of 4.
  const auto s = one_f_one_b{}.make({2, 1});
  const auto line = make_timeline(s, simulate(s, pipeline_costs::uniform(1, 2, 1, 1)));
  REQUIRE(line.makespan == Approx(4));
  const std::vector<double> one{1, 1}, lopsided{2, 1};
  // Stage 0 idles [1,3) between its ops; stage 1 idles [0,1) before its F and [3,4) after its B.
  CHECK(breakdown_of(line, one, 2) == time_breakdown{0.5, 0, 0.5, 1.0 / 8, 2.0 / 8, 1.0 / 8, 0});
  // GPUs no track stands for are idle the whole iteration.
  CHECK(breakdown_of(line, one, 4).ops == Approx(0.25));
  CHECK(breakdown_of(line, one, 4).idle == Approx(0.75));
  CHECK(breakdown_of(line, one, 4).unused_gpus == Approx(0.5));
  CHECK(breakdown_of(line, one, 4).idle_between_ops == Approx(2.0 / 16));
  // A track standing for a TP group of 2 weighs twice: (2 x 2 + 1 x 2) / (3 x 4).
  CHECK(breakdown_of(line, lopsided, 3).ops == Approx(0.5));
}

TEST_CASE("time breakdown: a gradient reduction counts only where no op runs", "[sim]") {
  timeline line;
  line.tracks = {"a", "b"};
  line.makespan = 4;
  line.events = {{0, timeline_kind::backward, 0, 0, 0, 0, 2},
                 {0, timeline_kind::gradient_sync, 0, 0, 0, 1, 4},  // [1,2) under the B: 2 of its 3 s exposed
                 {1, timeline_kind::forward, 0, 1, 0, 0, 1},
                 {1, timeline_kind::gradient_sync, 0, 1, 0, 2, 3}};
  const std::vector<double> gpus{1, 1};
  const time_breakdown b = breakdown_of(line, gpus, 2);
  CHECK(b.ops == Approx(3.0 / 8));
  CHECK(b.gradient_sync == Approx(3.0 / 8));
  CHECK(b.idle == Approx(2.0 / 8));
  // Track b: idle [1,2) between its F and its reduction, [3,4) after it; track a never.
  CHECK(b.idle_before_first_op == Approx(0).margin(1e-15));
  CHECK(b.idle_between_ops == Approx(1.0 / 8));
  CHECK(b.idle_after_last_op == Approx(1.0 / 8));
}

TEST_CASE("time breakdown: a parameter gather before the first op is reduction, not idle", "[sim]") {
  // Track a: gather [0,1), F [2,3), B [3,4), then nothing to 5. Track b: nothing at all.
  timeline line;
  line.tracks = {"a", "b"};
  line.makespan = 5;
  line.events = {{0, timeline_kind::gradient_sync, 0, 0, 0, 0, 1},
                 {0, timeline_kind::forward, 0, 0, 0, 2, 3},
                 {0, timeline_kind::backward, 0, 0, 0, 3, 4}};
  const std::vector<double> gpus{1, 2};
  const time_breakdown b = breakdown_of(line, gpus, 4);  // 4 GPUs x 5 s = 20
  CHECK(b.ops == Approx(2.0 / 20));
  CHECK(b.gradient_sync == Approx(1.0 / 20));
  CHECK(b.idle_before_first_op == Approx((1.0 + 2 * 5) / 20));  // a's [1,2), b's whole iteration
  CHECK(b.idle_between_ops == Approx(0).margin(1e-15));
  CHECK(b.idle_after_last_op == Approx(1.0 / 20));
  CHECK(b.unused_gpus == Approx(5.0 / 20));
  CHECK(b.ops + b.gradient_sync + b.idle == Approx(1));
}

TEST_CASE("time breakdown of random multimodal iterations: the simulator's busy times, shares adding to 1", "[sim]") {
  random_generator random(20261206);
  for (int trial = 0; trial < 60; ++trial) {
    const auto m = static_cast<std::uint32_t>(random.between(1, 6));
    const multimodal_costs costs = test::random_multimodal(random, m);
    const auto s = (trial % 2 == 0 ? zero_bubble_h1{}.make({costs.positions(), m}) : one_f_one_b{}.make({costs.positions(), m}));
    const simulation_result result = simulate(s, costs);
    const int encoder_tp = random.between(1, 2), llm_tp = random.between(1, 4);
    const auto gpus = gpus_per_rank(costs, encoder_tp, llm_tp);
    double used = 0, busy = 0;
    for (std::size_t r = 0; r < gpus.size(); ++r) {
      used += gpus[r];
      busy += gpus[r] * result.busy[r];
    }
    const double all = used + random.between(0, 3);
    const time_breakdown b = breakdown_of(make_timeline(s, costs, result), gpus, all);
    INFO("trial " << trial);
    CHECK(b.ops == Approx(busy / (all * result.makespan)));
    CHECK(b.ops + b.gradient_sync + b.idle == Approx(1));
    CHECK(b.gradient_sync >= 0);
    CHECK(b.idle >= -1e-12);
    CHECK(b.unused_gpus == Approx((all - used) / all).margin(1e-15));
    // Each rank's idle before its first op: the simulator's start of the first op
    // it runs, less its parameter gather, which precedes it.
    double before = 0;
    for (std::size_t r = 0; r < gpus.size(); ++r) {
      double first = result.rank_timings(r).front().start;
      if (!result.parameter_gather.empty()) first -= result.parameter_gather[r].end - result.parameter_gather[r].start;
      before += gpus[r] * first;
    }
    CHECK(b.idle_before_first_op == Approx(before / (all * result.makespan)).margin(1e-12));
    CHECK(b.idle_between_ops >= 0);
    CHECK(b.idle_after_last_op >= 0);
    // Each module's ranks alone: their shares of their own GPU time, which
    // weighted by the modules' GPUs give back the whole iteration's.
    const auto line = make_timeline(s, costs, result);
    const module_breakdowns modules = breakdown_by_module(line, gpus, costs);
    const std::size_t encoder_ranks = static_cast<std::size_t>(costs.encoder.stages) * costs.encoder.replicas;
    double encoder_gpus = 0;
    for (std::size_t r = 0; r < encoder_ranks; ++r) encoder_gpus += gpus[r];
    REQUIRE(modules.encoder.has_value() == (encoder_ranks > 0));
    const time_breakdown encoder = modules.encoder.value_or(time_breakdown{});
    for (auto field : {&time_breakdown::ops, &time_breakdown::gradient_sync, &time_breakdown::idle_before_first_op,
                       &time_breakdown::idle_between_ops, &time_breakdown::idle_after_last_op}) {
      const double weighted = (encoder_gpus * (encoder.*field) + (used - encoder_gpus) * (modules.llm.*field)) / all;
      CHECK(weighted == Approx(b.*field).margin(1e-12));
    }
    CHECK(modules.llm.unused_gpus == 0);
    CHECK(modules.llm.ops + modules.llm.gradient_sync + modules.llm.idle == Approx(1));
    // Nothing reduces gradients with no bytes to reduce.
    multimodal_costs silent = costs;
    for (module_costs* module : {&silent.encoder, &silent.llm})
      module->gradient_bytes.assign(module->gradient_bytes.size(), 0.0);
    const auto quiet = simulate(s, silent);
    CHECK(breakdown_of(make_timeline(s, silent, quiet), gpus, all).gradient_sync == Approx(0).margin(1e-12));
  }
}

TEST_CASE("time breakdown of some tracks: their own GPU time, the iteration's makespan", "[sim]") {
  // 1F1B on two stages, one microbatch, unit costs: stage 0 F [0,1) B [3,4); stage 1 F [1,2) B [2,3).
  const auto s = one_f_one_b{}.make({2, 1});
  const auto line = make_timeline(s, simulate(s, pipeline_costs::uniform(1, 2, 1, 1)));
  const std::vector<double> gpus{2, 1};
  CHECK(breakdown_of_tracks(line, gpus, 0, 1) == time_breakdown{0.5, 0, 0.5, 0, 0.5, 0, 0});
  CHECK(breakdown_of_tracks(line, gpus, 1, 2) == time_breakdown{0.5, 0, 0.5, 0.25, 0, 0.25, 0});
  CHECK_THROWS_WITH(breakdown_of_tracks(line, gpus, 1, 1), Catch::Contains("tracks [1, 1) of 2"));
  CHECK_THROWS_WITH(breakdown_of_tracks(line, gpus, 0, 3), Catch::Contains("tracks [0, 3) of 2"));
}

TEST_CASE("time breakdown: bad input says what is wrong", "[sim]") {
  const auto s = one_f_one_b{}.make({2, 1});
  const auto line = make_timeline(s, simulate(s, pipeline_costs::uniform(1, 2, 1, 1)));
  const std::vector<double> three{1, 1, 1}, none{1, 0}, two{2, 2};
  CHECK(test::error_of<dflop::error>([&] { (void)breakdown_of(line, three, 3); }).find("3 GPU counts for 2 tracks") !=
        std::string::npos);
  CHECK(test::error_of<dflop::error>([&] { (void)breakdown_of(line, none, 2); }).find("stands for no GPUs") != std::string::npos);
  CHECK(test::error_of<dflop::error>([&] { (void)breakdown_of(line, two, 3); }).find("more than the") != std::string::npos);
  timeline empty = line;
  empty.makespan = 0;
  CHECK(test::error_of<dflop::error>([&] { (void)breakdown_of(empty, std::vector<double>{1, 1}, 2); }).find("makespan") !=
        std::string::npos);
}
