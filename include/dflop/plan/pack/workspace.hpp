// SPDX-License-Identifier: Apache-2.0
//! \file
//! Scratch memory the packers reuse between calls, and the bin bookkeeping they
//! share (loads per bin, caps, fixing empty bins, writing the result). A packer
//! call sizes the workspace once; later calls of the same or smaller size do
//! not allocate. One workspace per thread: packers keep no other state.
#pragma once

#include <dflop/error.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/lower_bound.hpp>
#include <dflop/plan/pack/options.hpp>
#include <dflop/plan/pack/packing.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dflop {

//! Reusable scratch for packers. Its contents between calls are unspecified;
//! share one across calls (not across threads) to avoid allocation.
struct pack_workspace {
  std::vector<double> loads;                        //!< K x D summed costs per bin
  std::vector<double> cap_loads;                    //!< K x C capped quantities per bin
  std::vector<std::uint32_t> bin_of;                //!< current bin per sample
  std::vector<std::uint32_t> position;              //!< index of each sample in its bin's list
  std::vector<std::vector<std::uint32_t>> items;    //!< samples of each bin
  std::vector<std::uint32_t> order;                 //!< samples in a packer's processing order
  std::vector<double> keys;                         //!< sort keys (per sample or per bin)
  std::vector<double> scratch;                      //!< lower bound and final-load scratch
  std::vector<std::uint32_t> saved_bin_of;          //!< best assignment seen (refined, exact)
  std::vector<std::uint32_t> indices;               //!< per-bin index scratch
  std::vector<std::uint32_t> more_indices;          //!< second per-bin index scratch
  std::vector<double> tuple_loads;                  //!< Karmarkar-Karp partial solutions
  std::vector<std::uint32_t> tuple_heads;           //!< Karmarkar-Karp list heads
  std::vector<std::uint32_t> tuple_tails;           //!< Karmarkar-Karp list tails
  std::vector<std::uint32_t> next;                  //!< Karmarkar-Karp list links per sample
  std::vector<std::uint32_t> heap;                  //!< Karmarkar-Karp heap of partial solutions
  std::vector<std::uint32_t> tree;                  //!< local search: tournament tree over bin peaks
  std::vector<double> peaks;                        //!< local search: peak per bin
  std::vector<double> window_costs;                 //!< local search: gathered costs of a window
  std::vector<std::uint32_t> window_samples;        //!< local search: gathered samples of a window
  std::vector<std::pair<double, std::uint32_t>> ranked;  //!< LPT descent: (cost, sample) of a partner bin
  std::vector<std::uint32_t> descent_bin_of;        //!< refined: the LPT descent's assignment
};

namespace detail {

inline constexpr std::uint32_t no_bin = std::numeric_limits<std::uint32_t>::max();

//! Relative tolerance under which two makespans count as equal (rounding noise).
inline constexpr double relative_tolerance = 1e-12;

//! Rejects what no packer can take: K == 0, N < K, caps of the wrong shape.
//! Throws `infeasible_error` when the caps can be proven unsatisfiable up front.
inline void check_request(const cost_matrix& costs, std::size_t bins, const pack_options& options) {
  if (bins == 0) throw input_error("bins", 0, "the number of bins must be at least 1");
  if (costs.samples() < bins)
    throw input_error("bins", 0,
                      std::to_string(costs.samples()) + " samples cannot fill " + std::to_string(bins) +
                          " bins without leaving one empty (need N >= K)");
  if (bins > std::numeric_limits<std::uint32_t>::max() / 2 || costs.samples() > std::numeric_limits<std::uint32_t>::max() / 2)
    throw input_error("bins", 0, "too many samples or bins for a packer");
  if (options.caps == nullptr) return;
  const bin_caps& caps = *options.caps;
  if (caps.amounts.samples() != costs.samples())
    throw input_error("caps", 0,
                      "caps give amounts for " + std::to_string(caps.amounts.samples()) + " samples, costs have " +
                          std::to_string(costs.samples()));
  if (caps.limits.size() != caps.amounts.dimensions())
    throw input_error("caps", 0,
                      std::to_string(caps.limits.size()) + " limits for " + std::to_string(caps.amounts.dimensions()) +
                          " capped quantities");
  for (std::size_t c = 0; c < caps.limits.size(); ++c) {
    const double limit = caps.limits[c];
    if (!std::isfinite(limit) || limit < 0)
      throw input_error("caps", 0, "limit " + std::to_string(c) + " must be finite and >= 0");
    double total = 0;
    for (std::size_t i = 0; i < costs.samples(); ++i) {
      const double amount = caps.amounts(i, c);
      total += amount;
      if (amount > limit) {
        std::string reason = "infeasible caps: sample ";
        reason.append(std::to_string(i))
            .append(" alone needs ")
            .append(std::to_string(amount))
            .append(" of capped quantity ")
            .append(std::to_string(c))
            .append(", over the per-bin limit ")
            .append(std::to_string(limit));
        throw infeasible_error(reason);
      }
    }
    if (total > limit * static_cast<double>(bins) * (1 + relative_tolerance)) {
      std::string reason = "infeasible caps: the samples need ";
      reason.append(std::to_string(total))
          .append(" of capped quantity ")
          .append(std::to_string(c))
          .append(" in total, more than ")
          .append(std::to_string(bins))
          .append(" bins x limit ")
          .append(std::to_string(limit));
      throw infeasible_error(reason);
    }
  }
}

//! Bins under construction, over a workspace: loads, capped quantities and
//! membership lists updated in O(D + C) per move.
class bin_state {
public:
  bin_state(const cost_matrix& costs, std::size_t bins, const bin_caps* caps, pack_workspace& workspace)
      : costs_(costs), caps_(caps), work_(workspace), bins_(bins), dimensions_(costs.dimensions()),
        capped_(caps ? caps->limits.size() : 0) {
    clear();
  }

  //! Empties every bin: no sample assigned.
  void clear() {
    const std::size_t n = costs_.samples();
    work_.loads.assign(bins_ * dimensions_, 0.0);
    work_.cap_loads.assign(bins_ * capped_, 0.0);
    work_.bin_of.assign(n, no_bin);
    work_.position.assign(n, 0);
    if (work_.items.size() < bins_) work_.items.resize(bins_);
    for (std::size_t k = 0; k < bins_; ++k) work_.items[k].clear();
  }

  [[nodiscard]] const cost_matrix& costs() const noexcept { return costs_; }
  [[nodiscard]] const bin_caps* caps() const noexcept { return caps_; }
  [[nodiscard]] pack_workspace& workspace() noexcept { return work_; }
  [[nodiscard]] std::size_t bins() const noexcept { return bins_; }
  [[nodiscard]] std::size_t dimensions() const noexcept { return dimensions_; }
  [[nodiscard]] std::size_t samples() const noexcept { return costs_.samples(); }
  [[nodiscard]] std::uint32_t bin_of(std::size_t sample) const noexcept { return work_.bin_of[sample]; }
  [[nodiscard]] const std::vector<std::uint32_t>& items(std::size_t bin) const noexcept { return work_.items[bin]; }
  [[nodiscard]] const double* load(std::size_t bin) const noexcept { return work_.loads.data() + bin * dimensions_; }
  [[nodiscard]] const double* cost(std::size_t sample) const noexcept { return costs_.values().data() + sample * dimensions_; }

  //! Largest load of `bin` over the dimensions.
  [[nodiscard]] double peak(std::size_t bin) const noexcept {
    const double* l = load(bin);
    double best = l[0];
    for (std::size_t d = 1; d < dimensions_; ++d) best = std::max(best, l[d]);
    return best;
  }
  //! Peak of `bin` after adding `sample`.
  [[nodiscard]] double peak_with(std::size_t bin, std::size_t sample) const noexcept {
    const double* l = load(bin);
    const double* x = cost(sample);
    double best = l[0] + x[0];
    for (std::size_t d = 1; d < dimensions_; ++d) best = std::max(best, l[d] + x[d]);
    return best;
  }
  //! Peak of `bin` after removing `sample` (which it holds).
  [[nodiscard]] double peak_without(std::size_t bin, std::size_t sample) const noexcept {
    const double* l = load(bin);
    const double* x = cost(sample);
    double best = l[0] - x[0];
    for (std::size_t d = 1; d < dimensions_; ++d) best = std::max(best, l[d] - x[d]);
    return best;
  }
  //! Peak of `bin` after replacing `out` (which it holds) by `in`.
  [[nodiscard]] double peak_swapped(std::size_t bin, std::size_t out, std::size_t in) const noexcept {
    const double* l = load(bin);
    const double* x = cost(out);
    const double* y = cost(in);
    double best = l[0] - x[0] + y[0];
    for (std::size_t d = 1; d < dimensions_; ++d) best = std::max(best, l[d] - x[d] + y[d]);
    return best;
  }
  //! Max peak over all bins.
  [[nodiscard]] double makespan() const noexcept {
    double best = 0;
    for (std::size_t k = 0; k < bins_; ++k) best = std::max(best, peak(k));
    return best;
  }

  //! Whether `bin` can take `sample` (after giving up `leaving`, if any) within the caps.
  [[nodiscard]] bool fits(std::size_t bin, std::size_t sample, std::size_t leaving = no_bin) const noexcept {
    if (capped_ == 0) return true;
    const double* l = work_.cap_loads.data() + bin * capped_;
    for (std::size_t c = 0; c < capped_; ++c) {
      double after = l[c] + caps_->amounts(sample, c);
      if (leaving != no_bin) after -= caps_->amounts(leaving, c);
      if (after > caps_->limits[c] * (1 + relative_tolerance)) return false;
    }
    return true;
  }
  //! Capped quantity `c` of `bin` relative to its limit (after adding `sample`, if any).
  [[nodiscard]] double cap_fill(std::size_t bin, std::size_t c, std::size_t sample = no_bin) const noexcept {
    double load = work_.cap_loads[bin * capped_ + c];
    if (sample != no_bin) load += caps_->amounts(sample, c);
    return load / std::max(caps_->limits[c], 1e-300);
  }
  //! How far `bin` is over its caps (sum over capped quantities of the relative excess).
  [[nodiscard]] double overflow(std::size_t bin) const noexcept {
    double total = 0;
    const double* l = work_.cap_loads.data() + bin * capped_;
    for (std::size_t c = 0; c < capped_; ++c) {
      const double limit = caps_->limits[c];
      const double excess = l[c] - limit * (1 + relative_tolerance);
      if (excess > 0) total += excess / std::max(limit, 1e-300);
    }
    return total;
  }

  //! Puts an unassigned `sample` into `bin`.
  void assign(std::size_t sample, std::size_t bin) {
    auto& list = work_.items[bin];
    work_.position[sample] = static_cast<std::uint32_t>(list.size());
    list.push_back(static_cast<std::uint32_t>(sample));
    work_.bin_of[sample] = static_cast<std::uint32_t>(bin);
    add(sample, bin, 1.0);
  }
  //! Moves an assigned `sample` to `bin`.
  void move(std::size_t sample, std::size_t bin) {
    const std::size_t from = work_.bin_of[sample];
    auto& list = work_.items[from];
    const std::uint32_t at = work_.position[sample];
    list[at] = list.back();
    work_.position[list[at]] = at;
    list.pop_back();
    add(sample, from, -1.0);
    assign(sample, bin);
  }
  //! Exchanges the bins of two assigned samples.
  void swap(std::size_t a, std::size_t b) {
    const std::size_t bin_a = work_.bin_of[a];
    const std::size_t bin_b = work_.bin_of[b];
    const std::uint32_t at_a = work_.position[a];
    const std::uint32_t at_b = work_.position[b];
    work_.items[bin_a][at_a] = static_cast<std::uint32_t>(b);
    work_.items[bin_b][at_b] = static_cast<std::uint32_t>(a);
    work_.position[a] = at_b;
    work_.position[b] = at_a;
    work_.bin_of[a] = static_cast<std::uint32_t>(bin_b);
    work_.bin_of[b] = static_cast<std::uint32_t>(bin_a);
    add(a, bin_a, -1.0);
    add(b, bin_b, -1.0);
    add(a, bin_b, 1.0);
    add(b, bin_a, 1.0);
  }
  //! Takes back `sample`, the last one assigned to `bin` (undo for tree searches).
  void remove_last(std::size_t sample, std::size_t bin) {
    work_.items[bin].pop_back();
    work_.bin_of[sample] = no_bin;
    add(sample, bin, -1.0);
  }
  //! Rebuilds all bins from an assignment (one bin per sample).
  void load_assignment(const std::vector<std::uint32_t>& assignment) {
    std::fill(work_.loads.begin(), work_.loads.end(), 0.0);
    std::fill(work_.cap_loads.begin(), work_.cap_loads.end(), 0.0);
    for (std::size_t k = 0; k < bins_; ++k) work_.items[k].clear();
    for (std::size_t i = 0; i < samples(); ++i) assign(i, assignment[i]);
  }

private:
  void add(std::size_t sample, std::size_t bin, double sign) noexcept {
    double* l = work_.loads.data() + bin * dimensions_;
    const double* x = cost(sample);
    for (std::size_t d = 0; d < dimensions_; ++d) l[d] += sign * x[d];
    if (capped_ == 0) return;
    double* q = work_.cap_loads.data() + bin * capped_;
    for (std::size_t c = 0; c < capped_; ++c) q[c] += sign * caps_->amounts(sample, c);
  }

  const cost_matrix& costs_;
  const bin_caps* caps_;
  pack_workspace& work_;
  std::size_t bins_;
  std::size_t dimensions_;
  std::size_t capped_;
};

//! Moves samples out of bins that exceed a cap, into bins where they fit, then
//! tries swaps; throws `infeasible_error` naming `packer` when the caps still fail.
inline void enforce_caps(bin_state& state, std::string_view packer) {
  if (state.caps() == nullptr) return;
  const std::size_t bins = state.bins();
  for (int pass = 0; pass < 64; ++pass) {
    bool violated = false;
    bool progress = false;
    for (std::size_t b = 0; b < bins; ++b) {
      if (state.overflow(b) <= 0) continue;
      violated = true;
      // Moves: the sample whose move leaves the receiving bin's peak lowest.
      bool moved = true;
      while (moved && state.overflow(b) > 0) {
        moved = false;
        std::size_t best_sample = no_bin, best_bin = no_bin;
        double best_peak = std::numeric_limits<double>::infinity();
        for (std::uint32_t i : state.items(b))
          for (std::size_t c = 0; c < bins; ++c)
            if (c != b && state.fits(c, i)) {
              const double peak = state.peak_with(c, i);
              if (peak < best_peak) best_peak = peak, best_sample = i, best_bin = c;
            }
        if (best_sample != no_bin && state.items(b).size() > 1) {
          state.move(best_sample, best_bin);
          moved = progress = true;
        }
      }
      if (state.overflow(b) <= 0) continue;
      // Swaps that lower the total overflow of the pair.
      for (std::size_t c = 0; c < bins && state.overflow(b) > 0; ++c) {
        if (c == b) continue;
        bool swapped = true;
        while (swapped && state.overflow(b) > 0) {
          swapped = false;
          const double before = state.overflow(b) + state.overflow(c);
          for (std::size_t x = 0; x < state.items(b).size() && !swapped; ++x)
            for (std::size_t y = 0; y < state.items(c).size() && !swapped; ++y) {
              const std::uint32_t i = state.items(b)[x];
              const std::uint32_t j = state.items(c)[y];
              state.swap(i, j);
              if (state.overflow(b) + state.overflow(c) < before) {
                swapped = progress = true;
              } else {
                state.swap(i, j);
              }
            }
        }
      }
    }
    if (!violated) return;
    if (!progress) break;
  }
  for (std::size_t b = 0; b < bins; ++b)
    if (state.overflow(b) > 0) {
      std::string reason(packer);
      reason.append(": found no packing within the per-bin caps (the instance may still be feasible; "
                    "exact_packer decides small instances)");
      throw infeasible_error(reason);
    }
}

//! Gives every empty bin one sample from the fullest bin holding two or more.
//! Never raises the makespan: the source bin only loses, and the empty bin gets
//! a single sample, whose cost is at most the lower bound <= the makespan.
//! Fills the bins by the caps first, for caps too tight for a cost-balanced
//! start to repair: samples by decreasing size relative to the limits (their
//! largest capped amount over its limit), each to the bin whose fullest capped
//! quantity stays lowest (ties: the lower cost peak) among those it fits in.
//! Empty bins come first that way, so every bin gets a sample when N >= K.
//! Throws `infeasible_error` naming `packer` when a sample fits in no bin.
inline void cap_first_fill(bin_state& state, std::string_view packer) {
  const bin_caps& caps = *state.caps();
  const std::size_t n = state.samples();
  const std::size_t capped = caps.limits.size();
  std::vector<double> size(n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < capped; ++c)
      size[i] = std::max(size[i], caps.amounts(i, c) / std::max(caps.limits[c], 1e-300));
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0U);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return size[a] > size[b]; });
  for (std::uint32_t i : order) {
    std::size_t best = no_bin;
    double best_fill = std::numeric_limits<double>::infinity(), best_peak = best_fill;
    for (std::size_t b = 0; b < state.bins(); ++b) {
      if (!state.fits(b, i)) continue;
      double fill = 0;
      for (std::size_t c = 0; c < capped; ++c) fill = std::max(fill, state.cap_fill(b, c, i));
      const double peak = state.peak_with(b, i);
      if (fill < best_fill || (fill == best_fill && peak < best_peak)) best = b, best_fill = fill, best_peak = peak;
    }
    if (best == no_bin) {
      std::string reason(packer);
      reason.append(": found no packing within the per-bin caps, even filling by the caps first (sample ")
          .append(std::to_string(i))
          .append(" fits in no bin)");
      throw infeasible_error(reason);
    }
    state.assign(i, best);
  }
}

inline void fill_empty_bins(bin_state& state) {
  for (std::size_t e = 0; e < state.bins(); ++e) {
    if (!state.items(e).empty()) continue;
    std::size_t source = no_bin;
    for (std::size_t k = 0; k < state.bins(); ++k)
      if (state.items(k).size() > 1 && (source == no_bin || state.peak(k) > state.peak(source))) source = k;
    if (source == no_bin) return;  // N < K: cannot happen after check_request
    // The sample with the largest cost in the source's peak dimension, so the bottleneck drops most.
    std::size_t dimension = 0;
    for (std::size_t d = 1; d < state.dimensions(); ++d)
      if (state.load(source)[d] > state.load(source)[dimension]) dimension = d;
    std::uint32_t chosen = state.items(source).front();
    for (std::uint32_t i : state.items(source))
      if (state.cost(i)[dimension] > state.cost(chosen)[dimension] ||
          (state.cost(i)[dimension] == state.cost(chosen)[dimension] && i < chosen))
        chosen = i;
    state.move(chosen, e);
  }
}

//! Writes the result: bins grouped by a counting sort, makespan recomputed from
//! the costs (summing each bin's samples in ascending index order), bound and gap.
//! `bound` is the lower bound when already known, else negative.
inline void write_packing(bin_state& state, packing& out, double bound = -1) {
  const std::size_t n = state.samples();
  const std::size_t bins = state.bins();
  const std::size_t dimensions = state.dimensions();
  pack_workspace& work = state.workspace();
  out.bin_of.resize(n);
  out.members.resize(n);
  out.offsets.assign(bins + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    out.bin_of[i] = state.bin_of(i);
    ++out.offsets[out.bin_of[i] + 1];
  }
  for (std::size_t k = 0; k < bins; ++k) out.offsets[k + 1] += out.offsets[k];
  work.indices.assign(out.offsets.begin(), out.offsets.end() - 1);
  work.keys.assign(bins * dimensions, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = out.bin_of[i];
    out.members[work.indices[k]++] = i;
    for (std::size_t d = 0; d < dimensions; ++d) work.keys[k * dimensions + d] += state.costs()(i, d);
  }
  out.makespan = 0;
  for (double load : work.keys) out.makespan = std::max(out.makespan, load);
  out.lower_bound = bound >= 0 ? bound : detail::lower_bound(state.costs(), bins, work.scratch);
  out.gap = out.lower_bound > 0 ? out.makespan / out.lower_bound - 1 : 0.0;
}

//! Orders samples by decreasing total cost (ties: lower index first) into `work.order`.
inline void order_by_decreasing_size(const cost_matrix& costs, pack_workspace& work) {
  const std::size_t n = costs.samples();
  work.order.resize(n);
  work.keys.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    work.order[i] = static_cast<std::uint32_t>(i);
    double sum = 0;
    for (double value : costs.row(i)) sum += value;
    work.keys[i] = sum;
  }
  std::sort(work.order.begin(), work.order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return work.keys[a] != work.keys[b] ? work.keys[a] > work.keys[b] : a < b;
  });
}

}  // namespace detail
}  // namespace dflop
