// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a packer returns: which bin each sample went to, the bins as index
//! lists, and how good the result is (makespan, a lower bound, the gap).
#pragma once

#include <cstddef>
#include <ostream>
#include <span>
#include <vector>

namespace dflop {

//! A packing of N samples into K bins. Bins are stored as one index array
//! grouped by bin (`members`, ascending sample index within a bin) with
//! `offsets` (K + 1 entries), so a result is two flat arrays, not K vectors.
struct packing {
  std::vector<std::size_t> bin_of;   //!< bin of each sample (N entries)
  std::vector<std::size_t> members;  //!< sample indices grouped by bin (N entries)
  std::vector<std::size_t> offsets;  //!< bin k holds members[offsets[k] .. offsets[k+1])
  double makespan = 0;               //!< max over bins and dimensions of the summed costs
  double lower_bound = 0;            //!< `dflop::lower_bound(costs, K)`: no packing does better
  double gap = 0;                    //!< makespan / lower_bound - 1 (0 when both are 0)

  //! Number of bins K.
  [[nodiscard]] std::size_t bin_count() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
  //! The samples of bin `k`, ascending.
  [[nodiscard]] std::span<const std::size_t> bin(std::size_t k) const noexcept {
    return std::span<const std::size_t>(members).subspan(offsets[k], offsets[k + 1] - offsets[k]);
  }
  //! The bins as index lists (allocates; for printing and tools).
  [[nodiscard]] std::vector<std::vector<std::size_t>> bins() const {
    std::vector<std::vector<std::size_t>> lists(bin_count());
    for (std::size_t k = 0; k < lists.size(); ++k) lists[k].assign(bin(k).begin(), bin(k).end());
    return lists;
  }

  //! Same assignment and same figures.
  friend bool operator==(const packing&, const packing&) = default;
};

//! Prints `packing{makespan=..., lower_bound=..., gap=...%, bins=[[0, 3], [1, 2]]}`.
inline std::ostream& operator<<(std::ostream& out, const packing& result) {
  out << "packing{makespan=" << result.makespan << ", lower_bound=" << result.lower_bound
      << ", gap=" << result.gap * 100 << "%, bins=[";
  for (std::size_t k = 0; k < result.bin_count(); ++k) {
    out << (k ? ", [" : "[");
    const auto samples = result.bin(k);
    for (std::size_t i = 0; i < samples.size(); ++i) out << (i ? ", " : "") << samples[i];
    out << ']';
  }
  return out << "]}";
}

}  // namespace dflop
