// SPDX-License-Identifier: Apache-2.0
#include "pack_test_support.hpp"

#include <limits>

using namespace dflop;
using dflop::test::check_packing;
using dflop::test::random_costs;

namespace {

//! Optimal makespan by trying every assignment (K^N), honouring non-empty bins and caps.
double brute_force(const cost_matrix& costs, std::size_t bins, const bin_caps* caps = nullptr) {
  const std::size_t n = costs.samples(), dimensions = costs.dimensions();
  std::vector<std::size_t> assignment(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    std::vector<double> loads(bins * dimensions, 0.0);
    std::vector<double> capped(caps ? bins * caps->limits.size() : 0, 0.0);
    std::vector<int> counts(bins, 0);
    for (std::size_t i = 0; i < n; ++i) {
      ++counts[assignment[i]];
      for (std::size_t d = 0; d < dimensions; ++d) loads[assignment[i] * dimensions + d] += costs(i, d);
      if (caps)
        for (std::size_t c = 0; c < caps->limits.size(); ++c)
          capped[assignment[i] * caps->limits.size() + c] += caps->amounts(i, c);
    }
    bool ok = std::all_of(counts.begin(), counts.end(), [](int count) { return count > 0; });
    for (std::size_t q = 0; caps && q < capped.size(); ++q) ok = ok && capped[q] <= caps->limits[q % caps->limits.size()];
    if (ok) best = std::min(best, *std::max_element(loads.begin(), loads.end()));
    std::size_t digit = 0;
    while (digit < n && ++assignment[digit] == bins) assignment[digit++] = 0;
    if (digit == n) return best;
  }
}

}  // namespace

TEST_CASE("exact_packer matches brute force on tiny instances", "[pack]") {
  pack_workspace workspace;
  packing result;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    random_generator random(seed);
    const std::size_t bins = 1 + random.below(4);
    const std::size_t samples = bins + random.below(9 - bins);
    const auto costs = random_costs(samples, 1 + random.below(2), seed);
    CAPTURE(seed, samples, bins);
    exact_packer{}.pack(costs, bins, {}, workspace, result);
    check_packing(result, costs, bins);
    CHECK(result.makespan == Approx(brute_force(costs, bins)).epsilon(1e-12));
  }
}

TEST_CASE("exact_packer is no worse than every heuristic", "[pack]") {
  pack_workspace workspace;
  packing optimum, heuristic;
  for (std::uint64_t seed = 100; seed < 130; ++seed) {
    const std::size_t bins = 2 + seed % 3;
    const auto costs = random_costs(10 + seed % 5, 2, seed);
    CAPTURE(seed);
    exact_packer{}.pack(costs, bins, {}, workspace, optimum);
    check_packing(optimum, costs, bins);
    sequential_packer{}.pack(costs, bins, {}, workspace, heuristic);
    CHECK(optimum.makespan <= heuristic.makespan * (1 + 1e-12));
    lpt_packer{}.pack(costs, bins, {}, workspace, heuristic);
    CHECK(optimum.makespan <= heuristic.makespan * (1 + 1e-12));
    karmarkar_karp_packer{}.pack(costs, bins, {}, workspace, heuristic);
    CHECK(optimum.makespan <= heuristic.makespan * (1 + 1e-12));
    refined_packer{}.pack(costs, bins, {.seed = seed}, workspace, heuristic);
    CHECK(optimum.makespan <= heuristic.makespan * (1 + 1e-12));
  }
}

TEST_CASE("exact_packer refuses large or endless searches", "[pack]") {
  CHECK_THROWS_AS(pack(exact_packer{}, random_costs(40, 2, 1), 4), input_error);
  CHECK_THROWS_AS(pack(exact_packer{.max_samples = 64, .node_limit = 100}, random_costs(40, 2, 1), 7), search_limit_error);
}

TEST_CASE("caps are respected, or the instance is reported infeasible", "[pack]") {
  pack_workspace workspace;
  packing result;
  for (std::uint64_t seed = 0; seed < 25; ++seed) {
    const std::size_t bins = 2 + seed % 3;
    const auto costs = random_costs(8, 2, seed + 500);
    const auto tokens = random_costs(8, 1, seed + 900);
    double total = 0, largest = 0;
    for (std::size_t i = 0; i < 8; ++i) total += tokens(i, 0), largest = std::max(largest, tokens(i, 0));
    const bin_caps caps{tokens, {std::max(largest, total / static_cast<double>(bins) * 1.15)}};
    CAPTURE(seed, bins);
    const double optimum = brute_force(costs, bins, &caps);
    auto within_caps = [&](const packing& packed) {
      std::vector<double> used(bins, 0.0);
      for (std::size_t i = 0; i < 8; ++i) used[packed.bin_of[i]] += tokens(i, 0);
      return *std::max_element(used.begin(), used.end()) <= caps.limits[0] * (1 + 1e-9);
    };
    if (optimum == std::numeric_limits<double>::infinity()) {
      CHECK_THROWS_AS(exact_packer{}.pack(costs, bins, {.caps = &caps}, workspace, result), infeasible_error);
      continue;
    }
    exact_packer{}.pack(costs, bins, {.caps = &caps}, workspace, result);
    check_packing(result, costs, bins);
    CHECK(within_caps(result));
    CHECK(result.makespan == Approx(optimum).epsilon(1e-12));
    try {
      refined_packer{}.pack(costs, bins, {.caps = &caps}, workspace, result);
      check_packing(result, costs, bins);
      CHECK(within_caps(result));
    } catch (const infeasible_error&) {
      // A heuristic may fail to find a feasible packing; it must then say so, never return one over the caps.
    }
  }
}

TEST_CASE("caps that no packing can meet throw infeasible_error", "[pack]") {
  const auto costs = cost_matrix::from_rows({{1, 1}, {2, 2}, {3, 3}, {4, 4}});
  const bin_caps too_small = bin_caps::on_dimension(costs, 0, 3.5);  // sample 3 alone needs 4
  CHECK_THROWS_AS(pack(refined_packer{}, costs, 2, {.caps = &too_small}), infeasible_error);
  const bin_caps total = bin_caps::on_dimension(costs, 1, 4.5);      // 10 > 2 x 4.5
  CHECK_THROWS_AS(pack(lpt_packer{}, costs, 2, {.caps = &total}), infeasible_error);
  const bin_caps tight = bin_caps::on_dimension(costs, 0, 5);         // {1,4},{2,3}: exactly 5 each
  const auto exact = pack(exact_packer{}, costs, 2, {.caps = &tight});
  CHECK(exact.makespan == 5);
  const bin_caps impossible = bin_caps::on_dimension(costs, 0, 4.9);  // total 10 > 2 x 4.9
  CHECK_THROWS_AS(pack(exact_packer{}, costs, 2, {.caps = &impossible}), infeasible_error);
  // Feasible by totals and sizes, infeasible by combination: {3,3,3} into 2 bins of 5.
  const auto threes = cost_matrix::from_rows({{3}, {3}, {3}});
  const bin_caps five = bin_caps::on_dimension(threes, 0, 5);
  CHECK_THROWS_AS(pack(exact_packer{}, threes, 2, {.caps = &five}), infeasible_error);
  CHECK_THROWS_AS(pack(refined_packer{}, threes, 2, {.caps = &five}), infeasible_error);
}
