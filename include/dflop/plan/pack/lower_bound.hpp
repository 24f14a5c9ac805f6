// SPDX-License-Identifier: Apache-2.0
//! \file
//! A certified lower bound on the makespan of any packing of N samples into K
//! bins: the yardstick every packer's gap is measured against.
#pragma once

#include <dflop/error.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace dflop {

namespace detail {

//! `lower_bound` with caller-owned scratch (N doubles), so repeated calls do not allocate.
[[nodiscard]] inline double lower_bound(const cost_matrix& costs, std::size_t bins, std::vector<double>& scratch) {
  if (bins == 0) throw input_error("bins", 0, "the number of bins must be at least 1");
  const std::size_t n = costs.samples();
  double bound = 0;
  for (std::size_t d = 0; d < costs.dimensions(); ++d) {
    scratch.resize(n);
    for (std::size_t i = 0; i < n; ++i) scratch[i] = costs(i, d);
    std::sort(scratch.begin(), scratch.end(), std::greater<>());
    // In place: scratch[i] becomes a_1 + ... + a_(i+1), the sum of the i+1 largest costs.
    for (std::size_t i = 1; i < n; ++i) scratch[i] += scratch[i - 1];
    auto prefix = [&](std::size_t count) { return count == 0 ? 0.0 : scratch[count - 1]; };
    if (n == 0) continue;
    // (1) The bin holding the largest item carries at least a_1.
    bound = std::max(bound, prefix(1));
    // (2) K bins carry the total, so the fullest carries at least the average total / K.
    bound = std::max(bound, prefix(n) / static_cast<double>(bins));
    // (3) Pigeonhole, for every j >= 1 with m = jK + 1 <= N: K bins hold the m largest
    //     items, so some bin holds at least j + 1 of them; any j + 1 of the m largest
    //     sum to at least the j + 1 smallest of them, a_(m-j) + ... + a_m. (j = 1 is the
    //     classic a_K + a_(K+1).) Costs are >= 0, so the rest of that bin only adds.
    for (std::size_t j = 1; j * bins + 1 <= n; ++j) {
      const std::size_t m = j * bins + 1;
      bound = std::max(bound, prefix(m) - prefix(m - j - 1));
    }
  }
  // The makespan is a maximum over dimensions too, so the largest per-dimension bound holds.
  return bound;
}

}  // namespace detail

//! A lower bound on max over bins and dimensions of the summed costs, for any
//! packing into `bins` bins (exact up to floating-point rounding); each bound
//! used is proven in the implementation. O(D N log N). Throws `input_error` when bins == 0.
[[nodiscard]] inline double lower_bound(const cost_matrix& costs, std::size_t bins) {
  std::vector<double> scratch;
  return detail::lower_bound(costs, bins, scratch);
}

}  // namespace dflop
