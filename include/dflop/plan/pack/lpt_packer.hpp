// SPDX-License-Identifier: Apache-2.0
//! \file
//! Vector longest-processing-time first: the classic greedy (4/3-approximate in
//! one dimension), extended to cost vectors.
#pragma once

#include <dflop/plan/pack/packer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

namespace dflop {

namespace detail {

//! Greedy placement of every sample (in `work.order`, filled by
//! `order_by_decreasing_size`: largest total cost first) into one of the
//! `candidates` bins with the smallest total load, the one whose peak stays
//! lowest (ties: smaller total, then lower index), skipping bins over a cap.
//! A min-heap on total load keeps it O(N (log N + candidates log K)).
inline void greedy_fill(bin_state& state, std::size_t candidates) {
  pack_workspace& work = state.workspace();
  const std::size_t bins = state.bins();
  const std::size_t dimensions = state.dimensions();
  if (candidates >= bins) {
    // Every bin is a candidate: a plain scan, cheaper than the heap for small K.
    for (std::uint32_t sample : work.order) {
      std::size_t chosen = no_bin, fallback = 0;
      double chosen_peak = std::numeric_limits<double>::infinity(), fallback_peak = chosen_peak;
      double chosen_total = chosen_peak;
      for (std::size_t k = 0; k < bins; ++k) {
        const double peak = state.peak_with(k, sample);
        if (peak < fallback_peak) fallback_peak = peak, fallback = k;
        if (peak > chosen_peak) continue;
        double sum = 0;
        for (std::size_t d = 0; d < dimensions; ++d) sum += state.load(k)[d];
        if ((peak < chosen_peak || sum < chosen_total) && state.fits(k, sample))
          chosen_peak = peak, chosen_total = sum, chosen = k;
      }
      state.assign(sample, chosen == no_bin ? fallback : chosen);
    }
    return;
  }
  std::vector<double>& total = work.scratch;  // total load per bin over the dimensions
  total.assign(bins, 0.0);
  std::vector<std::uint32_t>& heap = work.indices;
  heap.resize(bins);
  for (std::size_t k = 0; k < bins; ++k) heap[k] = static_cast<std::uint32_t>(k);
  auto later = [&](std::uint32_t a, std::uint32_t b) { return total[a] != total[b] ? total[a] > total[b] : a > b; };
  std::make_heap(heap.begin(), heap.end(), later);  // already one: all zero, ordered by index
  std::vector<std::uint32_t>& popped = work.more_indices;
  candidates = std::max<std::size_t>(1, candidates);
  for (std::uint32_t sample : work.order) {
    popped.clear();
    std::uint32_t chosen = no_bin;
    double chosen_peak = std::numeric_limits<double>::infinity();
    std::uint32_t fallback = no_bin;  // least peak ignoring caps, used when no bin fits
    double fallback_peak = std::numeric_limits<double>::infinity();
    std::size_t fitting = 0;
    while (!heap.empty() && fitting < candidates) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const std::uint32_t bin = heap.back();
      heap.pop_back();
      popped.push_back(bin);
      const double peak = state.peak_with(bin, sample);
      if (peak < fallback_peak) fallback_peak = peak, fallback = bin;
      if (!state.fits(bin, sample)) continue;
      ++fitting;
      if (peak < chosen_peak) chosen_peak = peak, chosen = bin;
    }
    if (chosen == no_bin) chosen = fallback;
    state.assign(sample, chosen);
    const double* x = state.cost(sample);
    for (std::size_t d = 0; d < dimensions; ++d) total[chosen] += x[d];
    for (std::uint32_t bin : popped) {
      heap.push_back(bin);
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
}

}  // namespace detail

//! Vector LPT: samples by decreasing total cost, each into the bin (among the
//! `candidates` least loaded) where its peak stays lowest, within the caps.
//! O(N log N + N candidates log K). The seed is unused.
struct lpt_packer {
  //! Name used by tools and reports.
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "lpt"; }
  //! How many of the least-loaded bins each sample considers (all when >= K).
  std::size_t candidates = 4;

  //! Packs `costs` into `bins` bins (see `dflop::packer`).
  void pack(const cost_matrix& costs, std::size_t bins, const pack_options& options, pack_workspace& workspace,
            packing& result) const {
    detail::check_request(costs, bins, options);
    detail::bin_state state(costs, bins, options.caps, workspace);
    detail::order_by_decreasing_size(costs, workspace);
    detail::greedy_fill(state, candidates);
    detail::enforce_caps(state, name());
    detail::fill_empty_bins(state);
    detail::write_packing(state, result);
  }

  //! Same settings.
  friend bool operator==(const lpt_packer&, const lpt_packer&) = default;
};
static_assert(packer<lpt_packer>);

}  // namespace dflop
