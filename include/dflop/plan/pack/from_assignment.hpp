// SPDX-License-Identifier: Apache-2.0
//! \file
//! Completing a `packing` from a plain bin-per-sample assignment: the last step
//! of a user-defined packer, so it need not know the result's layout or
//! compute the makespan, bound and gap itself.
#pragma once

#include <dflop/error.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/lower_bound.hpp>
#include <dflop/plan/pack/packing.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Fills `result` from `bin_of` (one bin in [0, bins) per sample): members
//! grouped by bin, offsets, makespan, lower bound and gap. Throws `error` when
//! an entry is out of range or, with at least `bins` samples, a bin is empty.
inline void packing_from_assignment(const cost_matrix& costs, std::size_t bins, std::span<const std::size_t> bin_of,
                                    packing& result) {
  const std::size_t n = costs.samples();
  if (bin_of.size() != n)
    throw error("packing_from_assignment: " + std::to_string(bin_of.size()) + " bins for " + std::to_string(n) +
                " samples");
  result.bin_of.assign(bin_of.begin(), bin_of.end());
  result.offsets.assign(bins + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (bin_of[i] >= bins)
      throw error("packing_from_assignment: sample " + std::to_string(i) + " is in bin " + std::to_string(bin_of[i]) +
                  " of " + std::to_string(bins));
    ++result.offsets[bin_of[i] + 1];
  }
  for (std::size_t k = 0; k < bins; ++k) {
    if (n >= bins && result.offsets[k + 1] == 0)
      throw error("packing_from_assignment: bin " + std::to_string(k) + " is empty");
    result.offsets[k + 1] += result.offsets[k];
  }
  result.members.resize(n);
  std::vector<std::size_t> next(result.offsets.begin(), result.offsets.end() - 1);
  for (std::size_t i = 0; i < n; ++i) result.members[next[bin_of[i]]++] = i;
  std::vector<double> loads(bins * costs.dimensions(), 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t d = 0; d < costs.dimensions(); ++d) loads[bin_of[i] * costs.dimensions() + d] += costs(i, d);
  result.makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
  result.lower_bound = lower_bound(costs, bins);
  result.gap = result.lower_bound > 0 ? result.makespan / result.lower_bound - 1 : 0.0;
}

}  // namespace dflop
