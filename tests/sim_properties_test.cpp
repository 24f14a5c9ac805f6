// SPDX-License-Identifier: Apache-2.0
// Property tests on random heterogeneous costs: timings respect every dependency
// and rank order, the makespan is bounded below by busy time and the critical path
// and equals an independently computed longest path.
#include <dflop/schedule.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

using namespace dflop;

namespace {

pipeline_costs random_costs(random_generator& random, std::uint32_t m, std::uint32_t stages, bool with_transfer) {
  pipeline_costs costs;
  costs.microbatches = m;
  costs.stages = stages;
  const std::size_t n = static_cast<std::size_t>(m) * stages;
  for (std::size_t i = 0; i < n; ++i) {
    costs.forward.push_back(random.lognormal(0.0, 0.8));
    costs.backward.push_back(random.lognormal(0.5, 0.8));
    costs.weight.push_back(random.lognormal(-0.3, 0.8));
    if (with_transfer) costs.transfer.push_back(random.uniform(0.0, 0.3));
  }
  return costs;
}

double duration_of(const pipeline_schedule& s, const pipeline_costs& c, const pipeline_op& op) {
  const std::size_t at = c.at(op.microbatch, op.stage);
  if (op.kind == op_kind::forward) return c.forward[at];
  if (op.kind == op_kind::weight) return c.weight[at];
  return c.backward[at] + (s.split_backward ? 0.0 : c.weight[at]);
}

double delay_of(const pipeline_schedule& s, const pipeline_costs& c, const pipeline_op& from, const pipeline_op& to) {
  if (c.transfer.empty() || !crosses_ranks(s, from, to)) return 0.0;
  return c.transfer[c.at(to.microbatch, std::min(from.stage, to.stage))];
}

using key = std::tuple<int, std::uint32_t, std::uint32_t>;
key key_of(const pipeline_op& op) { return {static_cast<int>(op.kind), op.microbatch, op.stage}; }

// Longest path by memoized recursion: a second, independent implementation.
struct longest_path {
  const pipeline_schedule& s;
  const pipeline_costs& c;
  std::map<key, std::pair<std::uint32_t, std::size_t>> where;
  std::map<key, double> memo;

  double end_of(const pipeline_op& op) {
    if (auto found = memo.find(key_of(op)); found != memo.end()) return found->second;
    const auto [rank, index] = where.at(key_of(op));
    double start = index > 0 ? end_of(s.rank_ops[rank][index - 1]) : 0.0;
    for (const auto& need : dependencies(s, op)) start = std::max(start, end_of(need) + delay_of(s, c, need, op));
    return memo[key_of(op)] = start + duration_of(s, c, op);
  }
};

}  // namespace

TEST_CASE("simulated timings respect dependencies, rank order and bounds on random costs", "[sim]") {
  random_generator random(2024);
  pipeline_simulator simulator;  // reused across sizes on purpose
  simulation_result result;
  for (int trial = 0; trial < 60; ++trial) {
    const auto stages = static_cast<std::uint32_t>(random.between(1, 8));
    const auto v = static_cast<std::uint32_t>(random.between(1, 4));
    const auto m = static_cast<std::uint32_t>(random.between(1, 24));
    const bool with_transfer = trial % 2 == 0;
    std::vector<pipeline_schedule> schedules{gpipe{}.make({stages, m}), one_f_one_b{}.make({stages, m}),
                                             zero_bubble_h1{}.make({stages, m})};
    const std::uint32_t interleaved_m = (m + stages - 1) / stages * stages;
    schedules.push_back(interleaved_1f1b{v}.make({stages, interleaved_m}));
    for (const auto& s : schedules) {
      INFO(s.name << " S=" << stages << " v=" << s.chunks << " m=" << s.microbatches << " trial " << trial);
      const auto costs = random_costs(random, s.microbatches, s.stages(), with_transfer);
      simulator.simulate(s, costs, result);

      longest_path reference{s, costs, {}, {}};
      double busy_total = 0;
      for (std::uint32_t r = 0; r < s.ranks; ++r) {
        const auto times = result.rank_timings(r);
        REQUIRE(times.size() == s.rank_ops[r].size());
        double busy = 0;
        for (std::size_t i = 0; i < times.size(); ++i) {
          const auto& op = s.rank_ops[r][i];
          reference.where[key_of(op)] = {r, i};
          const double duration = duration_of(s, costs, op);
          REQUIRE(times[i].end == Approx(times[i].start + duration));
          if (i > 0) REQUIRE(times[i].start >= times[i - 1].end);
          busy += duration;
        }
        REQUIRE(result.busy[r] == Approx(busy));
        REQUIRE(result.makespan >= busy - 1e-9);
        busy_total += busy;
      }
      REQUIRE(result.bubble_fraction == Approx(1.0 - busy_total / (s.ranks * result.makespan)).margin(1e-12));

      // Every dependency: start >= its end plus the transfer.
      for (std::uint32_t r = 0; r < s.ranks; ++r)
        for (std::size_t i = 0; i < s.rank_ops[r].size(); ++i) {
          const auto& op = s.rank_ops[r][i];
          for (const auto& need : dependencies(s, op)) {
            const auto [nr, ni] = reference.where.at(key_of(need));
            REQUIRE(result.rank_timings(r)[i].start >= result.rank_timings(nr)[ni].end + delay_of(s, costs, need, op) - 1e-9);
          }
        }

      // Critical path of pure dependencies (no rank contention), per microbatch.
      double critical = 0;
      const std::uint32_t last = s.stages() - 1;
      for (std::uint32_t j = 0; j < s.microbatches; ++j) {
        double t = 0;
        for (std::uint32_t st = 0; st <= last; ++st) {
          const pipeline_op f{op_kind::forward, j, st, st / s.ranks};
          if (st > 0) t += delay_of(s, costs, {op_kind::forward, j, st - 1, (st - 1) / s.ranks}, f);
          t += duration_of(s, costs, f);
        }
        for (std::uint32_t st = last + 1; st-- > 0;) {
          const pipeline_op b{op_kind::backward, j, st, st / s.ranks};
          if (st < last) t += delay_of(s, costs, {op_kind::backward, j, st + 1, (st + 1) / s.ranks}, b);
          t += duration_of(s, costs, b);
          const double with_weight = s.split_backward ? t + costs.weight[costs.at(j, st)] : t;
          critical = std::max(critical, with_weight);
        }
      }
      REQUIRE(result.makespan >= critical - 1e-9);

      // Exact: equals the longest path computed by recursion.
      double longest = 0;
      for (const auto& ops : s.rank_ops) longest = std::max(longest, reference.end_of(ops.back()));
      REQUIRE(result.makespan == Approx(longest).epsilon(1e-12));
    }
  }
}

TEST_CASE("1F1B holds min(S - s, m) activations on stage s under any costs", "[sim]") {
  random_generator random(7);
  for (std::uint32_t stages = 1; stages <= 8; ++stages)
    for (std::uint32_t m : {1U, 3U, 8U, 17U}) {
      const auto result = simulate(one_f_one_b{}.make({stages, m}), random_costs(random, m, stages, true));
      for (std::uint32_t s = 0; s < stages; ++s) REQUIRE(result.peak_activations[s] == std::min(stages - s, m));
    }
}

TEST_CASE("a reused simulator gives the same answers as a fresh one", "[sim]") {
  random_generator random(11);
  pipeline_simulator reused;
  simulation_result result;
  for (int trial = 0; trial < 10; ++trial) {
    const auto stages = static_cast<std::uint32_t>(random.between(1, 6));
    const auto m = static_cast<std::uint32_t>(random.between(1, 12));
    const auto s = zero_bubble_h1{}.make({stages, m});
    const auto costs = random_costs(random, m, stages, true);
    reused.simulate(s, costs, result);
    const auto fresh = simulate(s, costs);
    CHECK(result.timings == fresh.timings);
    CHECK(result.makespan == fresh.makespan);
  }
}

TEST_CASE("the simulator rejects mismatched costs and broken schedules", "[sim]") {
  const auto s = one_f_one_b{}.make({2, 3});
  CHECK_THROWS_WITH(simulate(s, pipeline_costs::uniform(3, 3, 1, 1)),
                    "simulate: costs are for 3 microbatches x 3 stages, the schedule has 3 x 2");
  auto costs = pipeline_costs::uniform(3, 2, 1, 1);
  costs.forward.pop_back();
  CHECK_THROWS_WITH(simulate(s, costs), Catch::Contains("table 'forward' has 5 entries, expected 6"));
  auto broken = s;
  broken.rank_ops[0].pop_back();
  CHECK_THROWS_AS(simulate(broken, pipeline_costs::uniform(3, 2, 1, 1)), schedule_error);
  auto cyclic = s;
  std::swap(cyclic.rank_ops[1][0], cyclic.rank_ops[1][1]);
  CHECK_THROWS_WITH(simulate(cyclic, pipeline_costs::uniform(3, 2, 1, 1)), Catch::Contains("deadlock: rank"));
  const std::vector<std::uint32_t> bad_order{0, 1};
  CHECK_THROWS_AS(simulate(s, pipeline_costs::uniform(3, 2, 1, 1), bad_order), error);
}
