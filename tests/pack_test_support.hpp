// SPDX-License-Identifier: Apache-2.0
//! Random instances and invariant checks shared by the packer tests.
#pragma once

#include <dflop/plan/pack.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dflop::test {

//! N x D costs: mostly log-normal, some zeros and some large outliers, like mixed batches.
inline cost_matrix random_costs(std::size_t samples, std::size_t dimensions, std::uint64_t seed) {
  random_generator random(seed);
  std::vector<double> values(samples * dimensions);
  for (double& value : values) {
    const double kind = random.uniform();
    value = kind < 0.1 ? 0.0 : kind < 0.9 ? random.lognormal(0, 0.8) : random.uniform(3, 10);
  }
  return cost_matrix(samples, dimensions, std::move(values));
}

//! Checks every invariant of a packing of `costs` into `bins` bins.
inline void check_packing(const packing& result, const cost_matrix& costs, std::size_t bins) {
  const std::size_t n = costs.samples();
  REQUIRE(result.bin_count() == bins);
  REQUIRE(result.bin_of.size() == n);
  REQUIRE(result.members.size() == n);
  std::vector<int> seen(n, 0);
  for (std::size_t k = 0; k < bins; ++k) {
    REQUIRE_FALSE(result.bin(k).empty());
    for (std::size_t sample : result.bin(k)) {
      REQUIRE(sample < n);
      REQUIRE(result.bin_of[sample] == k);
      ++seen[sample];
    }
  }
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  // Recompute the makespan from the costs, in ascending sample order per bin.
  std::vector<double> loads(bins * costs.dimensions(), 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t d = 0; d < costs.dimensions(); ++d) loads[result.bin_of[i] * costs.dimensions() + d] += costs(i, d);
  REQUIRE(result.makespan == *std::max_element(loads.begin(), loads.end()));
  REQUIRE(result.lower_bound == lower_bound(costs, bins));
  REQUIRE(result.makespan >= result.lower_bound * (1 - 1e-12));
}

}  // namespace dflop::test
