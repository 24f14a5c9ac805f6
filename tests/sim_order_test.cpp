// SPDX-License-Identifier: Apache-2.0
// Microbatch ordering: Johnson's rule is optimal for two machines; the simulator-
// guided search is never worse than its start and reports what it simulated.
#include <dflop/schedule.hpp>
#include <dflop/sim/order.hpp>
#include <dflop/util/random.hpp>

#include "sim_test_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

using namespace dflop;

namespace {

double flow_shop(const std::vector<std::uint32_t>& order, const std::vector<double>& a, const std::vector<double>& b) {
  double first = 0;
  double second = 0;
  for (auto j : order) {
    first += a[j];
    second = std::max(second, first) + b[j];
  }
  return second;
}

bool is_permutation_of_iota(std::vector<std::uint32_t> order) {
  std::sort(order.begin(), order.end());
  for (std::uint32_t i = 0; i < order.size(); ++i)
    if (order[i] != i) return false;
  return true;
}

pipeline_costs skewed_costs(random_generator& random, std::uint32_t m, std::uint32_t stages) {
  // First half of the stages heavy for some microbatches, second half for others.
  pipeline_costs costs{m, stages, {}, {}, {}, {}};
  for (std::uint32_t j = 0; j < m; ++j) {
    const double front = random.lognormal(0, 1);
    const double back = random.lognormal(0, 1);
    for (std::uint32_t s = 0; s < stages; ++s) {
      const double base = s < stages / 2 ? front : back;
      costs.forward.push_back(base);
      costs.backward.push_back(2 * base);
    }
  }
  return costs;
}

}  // namespace

TEST_CASE("Johnson's rule is optimal for a two-machine flow shop", "[sim]") {
  random_generator random(5);
  for (int trial = 0; trial < 40; ++trial) {
    const auto n = static_cast<std::uint32_t>(random.between(1, 7));
    std::vector<double> a(n);
    std::vector<double> b(n);
    for (std::uint32_t j = 0; j < n; ++j) {
      a[j] = random.uniform(0.1, 5);
      b[j] = random.uniform(0.1, 5);
    }
    const auto johnson = johnson_order(a, b);
    REQUIRE(is_permutation_of_iota(johnson));
    auto order = identity_order(n);
    double best = flow_shop(order, a, b);
    while (std::next_permutation(order.begin(), order.end())) best = std::min(best, flow_shop(order, a, b));
    REQUIRE(flow_shop(johnson, a, b) == Approx(best));
  }
}

TEST_CASE("order policies on a pipeline: neh is never worse than identity or Johnson", "[sim]") {
  random_generator random(9);
  pipeline_simulator simulator;
  for (int trial = 0; trial < 6; ++trial) {
    const std::uint32_t stages = 4;
    const std::uint32_t m = 12;
    const auto costs = skewed_costs(random, m, stages);
    const auto s = one_f_one_b{}.make({stages, m});
    const auto identity = order_microbatches(order_policy::identity, s, costs, simulator);
    const auto johnson = order_microbatches(order_policy::johnson, s, costs, simulator);
    const auto neh = order_microbatches(order_policy::neh, s, costs, simulator, 400);
    CHECK(identity.order == identity_order(m));
    CHECK(is_permutation_of_iota(johnson.order));
    CHECK(is_permutation_of_iota(neh.order));
    CHECK(neh.evaluations <= 400);
    CHECK(neh.makespan <= std::min(identity.makespan, johnson.makespan) + 1e-9);
    CHECK(simulate(s, costs, neh.order).makespan == Approx(neh.makespan));
  }
  CHECK(parse_order_policy("neh") == order_policy::neh);
  CHECK_FALSE(parse_order_policy("random").has_value());
}

TEST_CASE("order policies on a multimodal iteration permute whole slots", "[sim]") {
  random_generator random(13);
  multimodal_costs c;
  c.microbatches = 8;
  c.encoder.stages = 1;
  c.encoder.replicas = 2;
  c.llm.stages = 2;
  c.llm.replicas = 2;
  for (std::uint32_t q = 0; q < 2; ++q)
    for (std::uint32_t k = 0; k < 8; ++k) {
      const double e = random.lognormal(0, 1);
      c.encoder.forward.push_back(e);
      c.encoder.backward.push_back(2 * e);
      for (std::uint32_t s = 0; s < 2; ++s) {
        const double l = random.lognormal(0, 0.7);
        c.llm.forward.push_back(l);
        c.llm.backward.push_back(2 * l);
      }
    }
  c.handoffs.assign(2 * 8 * 2, handoff{});
  for (std::uint32_t k = 0; k < 8; ++k)
    for (std::uint32_t r = 0; r < 2; ++r) c.handoffs[c.handoff_at(r, k, r)] = {true, 0.1};
  multimodal_simulator simulator;
  const auto s = one_f_one_b{}.make({3, 8});
  const auto identity = order_slots(order_policy::identity, s, c, simulator);
  const auto neh = order_slots(order_policy::neh, s, c, simulator, 200);
  CHECK(is_permutation_of_iota(neh.order));
  CHECK(neh.makespan <= identity.makespan + 1e-9);
  CHECK(simulate(s, c, neh.order).makespan == Approx(neh.makespan));
}

TEST_CASE("a multimodal makespan under a cutoff is exact below it and stops only at or above it", "[sim]") {
  random_generator random(21);
  multimodal_simulator bounded;
  multimodal_simulator whole;
  int stopped = 0;
  int finished = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const auto m = static_cast<std::uint32_t>(random.between(2, 9));
    const multimodal_costs c = test::random_multimodal(random, m);
    const auto s = random.between(0, 1) == 0 ? one_f_one_b{}.make({c.positions(), m}) : zero_bubble_h1{}.make({c.positions(), m});
    std::vector<std::uint32_t> order = identity_order(m);
    for (int shuffle = 0; shuffle < 4; ++shuffle) {
      std::shuffle(order.begin(), order.end(), random);
      const double makespan = whole.simulate(s, c, order).makespan;
      // Cutoffs around the true makespan: below it the run may stop; above it it must finish.
      for (const double factor : {0.5, 0.9, 0.999, 1.0, 1.001, 1.1, 2.0}) {
        const double cutoff = makespan * factor;
        const double found = bounded.makespan_below(s, c, order, cutoff);
        if (found == std::numeric_limits<double>::infinity()) {
          ++stopped;
          CHECK(makespan >= cutoff);
        } else {
          ++finished;
          CHECK(found == makespan);  // bit for bit: the same graph, run whole
        }
        if (factor > 1) CHECK(found == makespan);
      }
    }
  }
  CHECK(stopped > 100);  // the cutoff really stops runs (here: most of those below the makespan)
  CHECK(finished > 100);
}

TEST_CASE("the slot search finds the same order with and without stopping at its best", "[sim]") {
  random_generator random(23);
  multimodal_simulator simulator;
  for (int trial = 0; trial < 25; ++trial) {
    const auto m = static_cast<std::uint32_t>(random.between(3, 10));
    const multimodal_costs c = test::random_multimodal(random, m);
    const auto s = trial % 2 == 0 ? zero_bubble_h1{}.make({c.positions(), m}) : one_f_one_b{}.make({c.positions(), m});
    const auto searched = order_slots(order_policy::neh, s, c, simulator, 120);
    // The same search with every candidate simulated whole.
    std::vector<double> encoder;
    std::vector<double> llm;
    group_times(c, encoder, llm);
    multimodal_simulator whole;
    std::size_t whole_runs = 0;
    const auto reference = detail::order_with(
        order_policy::neh, encoder, llm,
        [&](const std::vector<std::uint32_t>& order, double) {
          ++whole_runs;
          return whole.simulate(s, c, order).makespan;
        },
        120);
    CHECK(searched.order == reference.order);
    CHECK(searched.makespan == reference.makespan);
    CHECK(searched.evaluations == reference.evaluations);
    CHECK(whole_runs == reference.evaluations);
  }
}
