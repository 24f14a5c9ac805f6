// SPDX-License-Identifier: Apache-2.0
// The multimodal simulator against an independent reference: every rank's op
// list spelled out as its own node, every edge of the model's definition (rank
// order, same-replica dependencies with their transfer, hand-offs between the
// replicas that share samples) listed explicitly, and start times found by
// relaxing all edges until nothing changes. The simulator walks one topological
// order of the one-replica schedule instead; both must give the same times, bit
// for bit, for any slot order, and an order search's bound runs must equal
// fresh ones.
#include <dflop/schedule.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/order.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include "error_of.hpp"
#include "sim_test_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

using namespace dflop;

namespace {

struct reference_edge {
  std::size_t from = 0;  // op index, rank-major as in simulation_result::timings
  double delay = 0;
};

// Op times by relaxation over the explicit rank graph of `costs` under `order`.
std::vector<op_timing> relaxed_times(const pipeline_schedule& schedule, const multimodal_costs& costs,
                                     const std::vector<std::uint32_t>& order) {
  const std::uint32_t m = costs.microbatches;
  const std::uint32_t encoder_stages = costs.encoder.stages;
  std::vector<std::size_t> first_op{0};
  for (std::uint32_t r = 0; r < costs.ranks(); ++r)
    first_op.push_back(first_op.back() + schedule.rank_ops[costs.position_of(r)].size());
  const auto rank_at = [&](std::uint32_t position, std::uint32_t replica) {
    return position < encoder_stages ? costs.encoder_rank(position, replica)
                                     : costs.llm_rank(position - encoder_stages, replica);
  };
  // The node of `op` (its stage is its position) on replica `replica`, by search.
  const auto node = [&](const pipeline_op& op, std::uint32_t replica) {
    const auto& list = schedule.rank_ops[op.stage];
    const auto at = std::find_if(list.begin(), list.end(), [&](const pipeline_op& other) {
      return other.kind == op.kind && other.microbatch == op.microbatch;
    });
    REQUIRE(at != list.end());
    return first_op[rank_at(op.stage, replica)] + static_cast<std::size_t>(at - list.begin());
  };
  std::vector<double> duration;
  std::vector<std::vector<reference_edge>> edges;
  for (std::uint32_t r = 0; r < costs.ranks(); ++r) {
    const std::uint32_t p = costs.position_of(r);
    const std::uint32_t q = costs.replica_of(r);
    const bool in_encoder = p < encoder_stages;
    const module_costs& module = in_encoder ? costs.encoder : costs.llm;
    const std::uint32_t local = in_encoder ? p : p - encoder_stages;
    const auto& ops = schedule.rank_ops[p];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const pipeline_op& op = ops[i];
      const std::uint32_t slot = order[op.microbatch];
      const std::size_t at = module.at(q, slot, local, m);
      const double weight = module.weight.empty() ? 0.0 : module.weight[at];
      duration.push_back(op.kind == op_kind::forward    ? module.forward[at]
                         : op.kind == op_kind::weight   ? weight
                         : schedule.split_backward      ? module.backward[at]
                                                        : module.backward[at] + weight);
      std::vector<reference_edge> in;
      if (i > 0) in.push_back({first_op[r] + i - 1, 0.0});
      for (const pipeline_op& need : dependencies(schedule, op)) {
        const bool need_in_encoder = need.stage < encoder_stages;
        if (need_in_encoder == in_encoder) {
          const double transfer =
              need.stage == op.stage || module.transfer.empty()
                  ? 0.0
                  : module.transfer[module.at(q, slot, std::min(need.stage, op.stage) - (in_encoder ? 0 : encoder_stages), m)];
          in.push_back({node(need, q), transfer});
        } else if (!in_encoder) {  // this LLM replica's microbatch waits for each encoder replica holding its samples
          for (std::uint32_t e = 0; e < costs.encoder.replicas; ++e)
            if (const handoff& h = costs.handoffs[costs.handoff_at(e, slot, q)]; h.feeds) in.push_back({node(need, e), h.seconds});
        } else {  // this encoder replica's part waits for the gradient of each LLM replica it fed
          for (std::uint32_t l = 0; l < costs.llm.replicas; ++l)
            if (const handoff& h = costs.handoffs[costs.handoff_at(q, slot, l)]; h.feeds) in.push_back({node(need, l), h.seconds});
        }
      }
      edges.push_back(std::move(in));
    }
  }
  std::vector<op_timing> times(duration.size(), op_timing{0.0, 0.0});
  for (std::size_t i = 0; i < duration.size(); ++i) times[i].end = duration[i];
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < duration.size(); ++i) {
      double begin = 0;
      for (const reference_edge& edge : edges[i]) begin = std::max(begin, times[edge.from].end + edge.delay);
      if (begin != times[i].start) {
        times[i] = {begin, begin + duration[i]};
        changed = true;
      }
    }
  }
  return times;
}

pipeline_schedule random_schedule(random_generator& random, std::uint32_t positions, std::uint32_t m) {
  switch (random.between(0, 2)) {
    case 0: return gpipe{}.make({positions, m});
    case 1: return one_f_one_b{}.make({positions, m});
    default: return zero_bubble_h1{}.make({positions, m});
  }
}

}  // namespace

TEST_CASE("multimodal op times equal a relaxation of the explicit rank graph, for any slot order", "[sim]") {
  random_generator random(71);
  multimodal_simulator simulator;
  simulation_result result;
  std::size_t ops_checked = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const auto m = static_cast<std::uint32_t>(random.between(1, 9));
    const multimodal_costs c = test::random_multimodal(random, m, 4, 4);
    const pipeline_schedule s = random_schedule(random, c.positions(), m);
    std::vector<std::uint32_t> order = identity_order(m);
    for (int shuffle = 0; shuffle < 3; ++shuffle) {
      std::shuffle(order.begin(), order.end(), random);
      simulator.simulate(s, c, result, order);
      const auto expected = relaxed_times(s, c, order);
      REQUIRE(result.timings.size() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        CHECK(result.timings[i].start == expected[i].start);
        CHECK(result.timings[i].end == expected[i].end);
      }
      ops_checked += expected.size();
    }
  }
  CHECK(ops_checked > 10000);
}

TEST_CASE("bound runs of an order search equal fresh simulations of each order", "[sim]") {
  random_generator random(73);
  multimodal_simulator bound;
  multimodal_simulator fresh;
  for (int trial = 0; trial < 60; ++trial) {
    const auto m = static_cast<std::uint32_t>(random.between(2, 9));
    const multimodal_costs c = test::random_multimodal(random, m, 4, 4);
    const pipeline_schedule s = random_schedule(random, c.positions(), m);
    bound.bind(s, c);
    std::vector<std::uint32_t> order = identity_order(m);
    for (int shuffle = 0; shuffle < 5; ++shuffle) {
      std::shuffle(order.begin(), order.end(), random);
      const double makespan = fresh.simulate(s, c, order).makespan;
      CHECK(bound.bound_makespan_below(order, std::numeric_limits<double>::infinity()) == makespan);
      CHECK(bound.bound_makespan_below(order, makespan * 1.001) == makespan);
      CHECK(bound.bound_makespan_below(order, makespan * 0.5) == std::numeric_limits<double>::infinity());
    }
  }
}

TEST_CASE("bound runs refuse a missing bind and a malformed order", "[sim]") {
  multimodal_simulator simulator;
  CHECK(test::error_of<error>([&] { (void)simulator.bound_makespan_below({}, 1.0); }) ==
        "multimodal_simulator: bound_makespan_below needs a bind() first");
  random_generator random(5);
  const multimodal_costs c = test::random_multimodal(random, 4);
  const pipeline_schedule s = one_f_one_b{}.make({c.positions(), 4});
  simulator.bind(s, c);
  const std::vector<std::uint32_t> short_order{0, 1, 2};
  CHECK(test::error_of<error>([&] { (void)simulator.bound_makespan_below(short_order, 1.0); }) ==
        "simulate: the slot order has 3 entries, expected 4");
  const std::vector<std::uint32_t> out_of_range{0, 1, 2, 4};
  CHECK(test::error_of<error>([&] { (void)simulator.bound_makespan_below(out_of_range, 1.0); }) ==
        "simulate: slot order entry out of range");
  // A failed bind leaves nothing bound.
  multimodal_costs broken = c;
  broken.llm.forward.pop_back();
  CHECK_THROWS(simulator.bind(s, broken));
  CHECK(test::error_of<error>([&] { (void)simulator.bound_makespan_below({}, 1.0); }) ==
        "multimodal_simulator: bound_makespan_below needs a bind() first");
}

TEST_CASE("a multimodal schedule that deadlocks is refused when bound", "[sim]") {
  random_generator random(9);
  const multimodal_costs c = test::random_multimodal(random, 3);
  pipeline_schedule s = one_f_one_b{}.make({c.positions(), 3});
  // The last position runs its ops backwards: each backward before its own forward.
  std::reverse(s.rank_ops.back().begin(), s.rank_ops.back().end());
  multimodal_simulator simulator;
  CHECK_THROWS_AS(simulator.bind(s, c), schedule_error);
  CHECK_THROWS_WITH(simulator.simulate(s, c), Catch::Contains("deadlock"));
}
