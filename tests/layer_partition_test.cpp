// SPDX-License-Identifier: Apache-2.0
#include <dflop/plan/layer_partition.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>

namespace {

// Every way to cut `costs` into `stages` non-empty contiguous blocks; the least slowest block.
double brute_force_slowest(const std::vector<double>& costs, std::size_t stages) {
  double best = std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, std::size_t, double)> recurse = [&](std::size_t begin, std::size_t left,
                                                                      double worst) {
    if (left == 1) {
      double sum = 0;
      for (std::size_t i = begin; i < costs.size(); ++i) sum += costs[i];
      best = std::min(best, std::max(worst, sum));
      return;
    }
    double sum = 0;
    for (std::size_t end = begin + 1; end + (left - 1) <= costs.size(); ++end) {
      sum += costs[end - 1];
      recurse(end, left - 1, std::max(worst, sum));
    }
  };
  recurse(0, stages, 0.0);
  return best;
}

}  // namespace

TEST_CASE("min-max layer partition equals brute force on random small cases", "[plan][partition]") {
  dflop::random_generator rng{11};
  for (int trial = 0; trial < 300; ++trial) {
    const auto layers = static_cast<std::size_t>(rng.between(1, 12));
    const auto stages = static_cast<std::size_t>(rng.between(1, static_cast<std::int64_t>(layers)));
    std::vector<double> costs(layers);
    for (auto& cost : costs) cost = rng.uniform() < 0.2 ? rng.uniform(5, 20) : rng.uniform(0, 3);
    const auto partition = dflop::partition_layers(costs, stages);
    REQUIRE(partition.stages() == stages);
    REQUIRE(partition.first_layer.front() == 0);
    REQUIRE(partition.first_layer.back() == layers);
    double recomputed = 0;
    for (std::size_t stage = 0; stage < stages; ++stage) {
      REQUIRE(partition.layers_on(stage) >= 1);
      double sum = 0;
      for (auto i = partition.first_layer[stage]; i < partition.first_layer[stage + 1]; ++i) sum += costs[i];
      recomputed = std::max(recomputed, sum);
    }
    CHECK(recomputed == Approx(partition.slowest_stage_cost));
    CHECK(partition.slowest_stage_cost == Approx(brute_force_slowest(costs, stages)));
    CHECK(partition.slowest_stage_cost <= dflop::partition_layers_evenly(costs, stages).slowest_stage_cost + 1e-12);
  }
}

TEST_CASE("a heavy LM head moves layers off the last stage", "[plan][partition]") {
  // 8 equal layers + an LM head costing 3 layers on the end; 3 stages.
  std::vector<double> costs(8, 1.0);
  costs.push_back(3.0);
  const auto even = dflop::partition_layers_evenly(costs, 3);
  const auto best = dflop::partition_layers(costs, 3);
  CHECK(even.slowest_stage_cost == 5.0);  // [0,3) [3,6) [6,9): 3, 3, 2 + 3
  CHECK(best.slowest_stage_cost == 4.0);  // 4 | 4 | head alone (3): earlier stages take the slack
  CHECK(best.first_layer == std::vector<std::size_t>{0, 4, 8, 9});
}

TEST_CASE("bad partition requests are rejected with a reason", "[plan][partition]") {
  std::vector<double> costs{1, 2};
  CHECK_THROWS_WITH(dflop::partition_layers(costs, 3), Catch::Contains("3 stages cannot each get a layer out of 2"));
  CHECK_THROWS_WITH(dflop::partition_layers(costs, 0), Catch::Contains("at least one stage"));
  costs[1] = -1;
  CHECK_THROWS_WITH(dflop::partition_layers(costs, 1), Catch::Contains("layer 1 has a negative"));
}
