// SPDX-License-Identifier: Apache-2.0
//! \file
//! Multiway largest differencing (Karmarkar-Karp), vector form: repeatedly
//! merge the two most unbalanced partial solutions, heaviest bins of one with
//! the lightest of the other, so their imbalances cancel.
#pragma once

#include <dflop/plan/pack/packer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dflop {

namespace detail {

//! Karmarkar-Karp over K-bin partial solutions ("tuples"). The samples, largest
//! first (`work.order`, filled by `order_by_decreasing_size`), are cut into
//! ceil(N / K) tuples of K (one sample per bin), so memory
//! stays O(N D + K) instead of one tuple per sample. A max-heap on a tuple's
//! spread (max over dimensions of heaviest minus lightest bin) picks the two to
//! merge; bins are ranked by total load. Bin lists are linked lists, so a merge
//! costs O(K log K + K D); N / K merges: O(N log K) after the sort.
inline void differencing_fill(bin_state& state) {
  pack_workspace& work = state.workspace();
  const std::size_t n = state.samples();
  const std::size_t bins = state.bins();
  const std::size_t dimensions = state.dimensions();
  const std::size_t tuples = (n + bins - 1) / bins;
  const std::size_t temporary = tuples;  // one extra tuple slot receives each merge
  work.tuple_loads.assign((tuples + 1) * bins * dimensions, 0.0);
  work.tuple_heads.assign((tuples + 1) * bins, no_bin);
  work.tuple_tails.assign((tuples + 1) * bins, no_bin);
  work.next.assign(n, no_bin);
  for (std::size_t rank = 0; rank < n; ++rank) {
    const std::uint32_t sample = work.order[rank];
    const std::size_t slot = rank;  // tuple rank / K, bin rank % K
    work.tuple_heads[slot] = work.tuple_tails[slot] = sample;
    const double* x = state.cost(sample);
    for (std::size_t d = 0; d < dimensions; ++d) work.tuple_loads[slot * dimensions + d] = x[d];
  }
  auto load = [&](std::size_t tuple, std::size_t bin) { return work.tuple_loads.data() + (tuple * bins + bin) * dimensions; };
  auto total = [&](std::size_t tuple, std::size_t bin) {
    const double* l = load(tuple, bin);
    double sum = 0;
    for (std::size_t d = 0; d < dimensions; ++d) sum += l[d];
    return sum;
  };
  auto spread = [&](std::size_t tuple) {
    double widest = 0;
    for (std::size_t d = 0; d < dimensions; ++d) {
      double low = load(tuple, 0)[d], high = low;
      for (std::size_t k = 1; k < bins; ++k) low = std::min(low, load(tuple, k)[d]), high = std::max(high, load(tuple, k)[d]);
      widest = std::max(widest, high - low);
    }
    return widest;
  };
  // Heap of tuples by spread; keys[t] is tuple t's spread.
  std::vector<double>& key = work.keys;
  key.resize(tuples + 2 * bins);
  for (std::size_t t = 0; t < tuples; ++t) key[t] = spread(t);
  double* sums_a = key.data() + tuples;
  double* sums_b = sums_a + bins;
  std::vector<std::uint32_t>& heap = work.heap;
  heap.resize(tuples);
  for (std::size_t t = 0; t < tuples; ++t) heap[t] = static_cast<std::uint32_t>(t);
  auto before = [&](std::uint32_t a, std::uint32_t b) { return key[a] != key[b] ? key[a] < key[b] : a > b; };
  std::make_heap(heap.begin(), heap.end(), before);
  std::vector<std::uint32_t>& rank_a = work.indices;
  std::vector<std::uint32_t>& rank_b = work.more_indices;
  rank_a.resize(bins);
  rank_b.resize(bins);
  while (heap.size() > 1) {
    std::pop_heap(heap.begin(), heap.end(), before);
    const std::uint32_t a = heap.back();
    heap.pop_back();
    std::pop_heap(heap.begin(), heap.end(), before);
    const std::uint32_t b = heap.back();
    heap.pop_back();
    for (std::size_t k = 0; k < bins; ++k) {
      rank_a[k] = rank_b[k] = static_cast<std::uint32_t>(k);
      sums_a[k] = total(a, k);
      sums_b[k] = total(b, k);
    }
    std::sort(rank_a.begin(), rank_a.end(), [&](std::uint32_t x, std::uint32_t y) {
      return sums_a[x] != sums_a[y] ? sums_a[x] > sums_a[y] : x < y;
    });
    std::sort(rank_b.begin(), rank_b.end(), [&](std::uint32_t x, std::uint32_t y) {
      return sums_b[x] != sums_b[y] ? sums_b[x] < sums_b[y] : x < y;
    });
    for (std::size_t r = 0; r < bins; ++r) {
      const std::size_t from_a = a * bins + rank_a[r];
      const std::size_t from_b = b * bins + rank_b[r];
      const std::size_t to = temporary * bins + r;
      for (std::size_t d = 0; d < dimensions; ++d)
        work.tuple_loads[to * dimensions + d] = work.tuple_loads[from_a * dimensions + d] + work.tuple_loads[from_b * dimensions + d];
      std::uint32_t head = work.tuple_heads[from_a], tail = work.tuple_tails[from_a];
      if (head == no_bin) {
        head = work.tuple_heads[from_b];
        tail = work.tuple_tails[from_b];
      } else if (work.tuple_heads[from_b] != no_bin) {
        work.next[tail] = work.tuple_heads[from_b];
        tail = work.tuple_tails[from_b];
      }
      work.tuple_heads[to] = head;
      work.tuple_tails[to] = tail;
    }
    std::copy_n(work.tuple_loads.begin() + static_cast<std::ptrdiff_t>(temporary * bins * dimensions), bins * dimensions,
                work.tuple_loads.begin() + static_cast<std::ptrdiff_t>(a * bins * dimensions));
    std::copy_n(work.tuple_heads.begin() + static_cast<std::ptrdiff_t>(temporary * bins), bins,
                work.tuple_heads.begin() + static_cast<std::ptrdiff_t>(a * bins));
    std::copy_n(work.tuple_tails.begin() + static_cast<std::ptrdiff_t>(temporary * bins), bins,
                work.tuple_tails.begin() + static_cast<std::ptrdiff_t>(a * bins));
    key[a] = spread(a);
    heap.push_back(a);
    std::push_heap(heap.begin(), heap.end(), before);
  }
  const std::size_t last = heap.front();
  for (std::size_t k = 0; k < bins; ++k)
    for (std::uint32_t sample = work.tuple_heads[last * bins + k]; sample != no_bin; sample = work.next[sample])
      state.assign(sample, k);
}

}  // namespace detail

//! Vector Karmarkar-Karp (largest differencing), then caps repaired by moves
//! and swaps. Excellent on many small items; O(N log N + N log K). The seed is unused.
struct karmarkar_karp_packer {
  //! Name used by tools and reports.
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "karmarkar_karp"; }

  //! Packs `costs` into `bins` bins (see `dflop::packer`).
  void pack(const cost_matrix& costs, std::size_t bins, const pack_options& options, pack_workspace& workspace,
            packing& result) const {
    detail::check_request(costs, bins, options);
    detail::bin_state state(costs, bins, options.caps, workspace);
    detail::order_by_decreasing_size(costs, workspace);
    detail::differencing_fill(state);
    detail::enforce_caps(state, name());
    detail::fill_empty_bins(state);
    detail::write_packing(state, result);
  }
};
static_assert(packer<karmarkar_karp_packer>);

}  // namespace dflop
