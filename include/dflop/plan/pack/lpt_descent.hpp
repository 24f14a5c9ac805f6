// SPDX-License-Identifier: Apache-2.0
//! \file
//! The simple local search `refined_packer` must never lose to: vector LPT,
//! then move/swap descent out of the bottleneck bin to a local optimum.
//!
//! Acceptance rule. A step is a move of one sample of the bottleneck bin (the
//! bin with the highest peak, the lowest index among ties) to another bin, or a
//! swap of one of its samples with one of another bin's. It is accepted only if
//! both bins it touches end strictly below the current makespan (by a relative
//! 1e-12, so rounding noise never counts as progress) and within the caps; a
//! move must leave the bottleneck non-empty. So every step lowers (makespan,
//! number of bins at the makespan) lexicographically, and the descent ends.
//!
//! Path. Partners are tried lightest first in the bottleneck's peak dimension
//! (ties: lower bin index); the first that admits an accepted step gets its best
//! one: the lowest peak of the two bins afterwards (ties: lower sample indices,
//! out then in, a move counting as in = `no_bin`). The descent stops when the
//! bottleneck admits no accepted step with any bin (a local optimum: no single
//! move or swap lowers the makespan) or when the makespan reaches the lower bound.
//!
//! It is exhaustive (every bin, every sample of both bins), deterministic and
//! unbudgeted. (Also accepting steps between any two bins that keep the
//! makespan and lower the sum of squared bin peaks finds better packings, but
//! that neighbourhood is O(N^2) per pass: a straightforward version made about
//! 2 million evaluations, 10 ms, for 512 samples into 64 bins, over 20 times
//! `refined_packer`'s time.)
#pragma once

#include <dflop/plan/pack/lower_bound.hpp>
#include <dflop/plan/pack/lpt_packer.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/pack/workspace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace dflop::detail {

//! How many of the least-loaded bins each sample considers in the LPT start of
//! `refined_packer` and of the descent: every bin while that is cheap (K <= 128),
//! else 4 (as `lpt_packer`).
[[nodiscard]] constexpr std::size_t lpt_start_candidates(std::size_t bins) noexcept { return bins <= 128 ? bins : 4; }

//! Largest N for which `refined_packer` runs the descent. Its steps scan every
//! partner and every sample of both bins, unbudgeted; above this N that costs
//! more than the windowed, budgeted search of `refined_packer`, which then
//! runs alone, and "never worse than `lpt_descent`" is not promised.
inline constexpr std::size_t descent_sample_limit = 1024;

//! One candidate step of the descent: move `out` (when `in` is `no_bin`) or swap
//! `out` with `in`; `peak` is the larger peak of the two bins afterwards.
struct descent_step {
  std::uint32_t out = no_bin;  //!< sample leaving the bottleneck
  std::uint32_t in = no_bin;   //!< sample entering it, `no_bin` for a move
  double peak = 0;             //!< max of the two bins' peaks after the step
};

//! Finds the best step between two bins: the lowest pair peak below `cut`,
//! ties to the lower (out, in) sample indices (a move counts as in = `no_bin`),
//! so the answer does not depend on the order candidates are examined in.
//! `Dims` is the number of dimensions when known at compile time, else 0.
template <std::size_t Dims>
class descent_step_search {
public:
  descent_step_search(const bin_state& state, std::size_t from, std::size_t to, double cut)
      : state_(state), from_(from), to_(to), from_load_(state.load(from)), to_load_(state.load(to)),
        dimensions_(Dims ? Dims : state.dimensions()), capped_(state.caps() != nullptr), best_{no_bin, no_bin, cut} {}

  //! Every move and swap.
  descent_step all() {
    const auto& mine = state_.items(from_);
    moves();
    for (const std::uint32_t x : mine)
      for (const std::uint32_t y : state_.items(to_)) swap(x, y);
    return best_;
  }

  //! The same answer for large bins: swaps only where they can tie or beat the
  //! best so far. In dimension s, a swap's pair peak is at least
  //! (L_from + L_to) / 2 + |x_s - y_s - (L_from - L_to) / 2|, so with the
  //! partner's samples sorted by their cost in s, each sample of the bottleneck
  //! scans only a window of them. `sorted` is scratch.
  descent_step windowed(std::vector<std::pair<double, std::uint32_t>>& sorted) {
    moves();
    std::size_t s = 0;  // the dimension where the pair is heaviest: the narrowest windows
    for (std::size_t d = 1; d < dimensions_; ++d)
      if (from_load_[d] + to_load_[d] > from_load_[s] + to_load_[s]) s = d;
    const double middle = (from_load_[s] + to_load_[s]) / 2;
    const double center = (from_load_[s] - to_load_[s]) / 2;
    const double slack = 1e-9 * best_.peak;  // covers rounding: a window never misses a candidate
    sorted.clear();
    for (const std::uint32_t y : state_.items(to_)) sorted.emplace_back(state_.cost(y)[s], y);
    std::sort(sorted.begin(), sorted.end());
    for (const std::uint32_t x : state_.items(from_)) {
      const double width = best_.peak - middle + slack;
      if (width < 0) break;  // the best only falls: no later sample has a window either
      const double target = state_.cost(x)[s] - center;
      auto y = std::lower_bound(sorted.begin(), sorted.end(), target - width,
                                [](const std::pair<double, std::uint32_t>& a, double value) { return a.first < value; });
      for (; y != sorted.end() && y->first <= target + width; ++y) swap(x, y->second);
    }
    return best_;
  }

private:
  //! Whether a step with pair peak `value` beats the best so far.
  [[nodiscard]] bool beats(double value, std::uint32_t out, std::uint32_t in) const noexcept {
    if (value != best_.peak) return value < best_.peak;
    return best_.out != no_bin && (out != best_.out ? out < best_.out : in < best_.in);
  }

  void moves() {
    const auto& mine = state_.items(from_);
    if (mine.size() < 2) return;  // a move must not empty the bottleneck
    for (const std::uint32_t x : mine) {
      const double* cx = state_.cost(x);
      double value = 0;
      for (std::size_t d = 0; d < dimensions_; ++d)
        value = std::max(value, std::max(from_load_[d] - cx[d], to_load_[d] + cx[d]));
      if (beats(value, x, no_bin) && (!capped_ || state_.fits(to_, x))) best_ = {x, no_bin, value};
    }
  }

  void swap(std::uint32_t x, std::uint32_t y) {
    const double* cx = state_.cost(x);
    const double* cy = state_.cost(y);
    double value = 0;
    for (std::size_t d = 0; d < dimensions_; ++d) value = std::max(value, from_load_[d] - cx[d] + cy[d]);
    if (value > best_.peak) return;
    for (std::size_t d = 0; d < dimensions_; ++d) value = std::max(value, to_load_[d] - cy[d] + cx[d]);
    if (!beats(value, x, y)) return;
    if (capped_ && !(state_.fits(to_, x, y) && state_.fits(from_, y, x))) return;
    best_ = {x, y, value};
  }

  const bin_state& state_;
  std::size_t from_, to_;
  const double* from_load_;
  const double* to_load_;
  std::size_t dimensions_;
  bool capped_;
  descent_step best_;
};

//! The best step (see `descent_step_search`) from `from` (the bottleneck) to
//! `to` whose pair peak stays below `cut`, within the caps; `out == no_bin` when
//! none. Small bins try every pair; large ones scan windows (same answer).
template <std::size_t Dims>
[[nodiscard]] descent_step best_descent_step(const bin_state& state, std::size_t from, std::size_t to, double cut,
                                             std::vector<std::pair<double, std::uint32_t>>& scratch) {
  descent_step_search<Dims> search(state, from, to, cut);
  return state.items(from).size() * state.items(to).size() <= 256 ? search.all() : search.windowed(scratch);
}

//! Runs the descent (see the file comment) on `state` until a local optimum or
//! until the makespan is within rounding of `bound`; returns the steps taken.
//! Deterministic: no randomness, no budget. Per dimension, the bins stay sorted
//! by (load, index), so a step finds its partners in order without sorting:
//! O(K D) upkeep per step besides the moves and swaps it examines. Uses `peaks`,
//! `indices` and `ranked` of the workspace.
inline std::size_t bottleneck_descent(bin_state& state, double bound) {
  pack_workspace& work = state.workspace();
  const std::size_t bins = state.bins();
  if (bins < 2) return 0;
  const std::size_t dimensions = state.dimensions();
  const double good_enough = bound * (1 + relative_tolerance);
  std::vector<double>& peaks = work.peaks;
  peaks.resize(bins);
  for (std::size_t k = 0; k < bins; ++k) peaks[k] = state.peak(k);
  if (*std::max_element(peaks.begin(), peaks.end()) <= good_enough) return 0;  // before sorting anything
  std::vector<std::uint32_t>& sorted = work.indices;  // K per dimension
  std::vector<std::pair<double, std::uint32_t>>& scratch = work.ranked;
  sorted.resize(bins * dimensions);
  auto lighter_in = [&state](std::size_t d) {
    return [&state, d](std::uint32_t a, std::uint32_t b) {
      const double x = state.load(a)[d], y = state.load(b)[d];
      return x != y ? x < y : a < b;
    };
  };
  for (std::size_t d = 0; d < dimensions; ++d) {
    const auto first = sorted.begin() + static_cast<std::ptrdiff_t>(d * bins);
    for (std::size_t k = 0; k < bins; ++k) first[static_cast<std::ptrdiff_t>(k)] = static_cast<std::uint32_t>(k);
    std::sort(first, first + static_cast<std::ptrdiff_t>(bins), lighter_in(d));
  }
  // After a step between bins a and b: take both out of each dimension's order
  // and put them back where their new loads go.
  auto reorder = [&](std::uint32_t a, std::uint32_t b) {
    for (std::size_t d = 0; d < dimensions; ++d) {
      const auto first = sorted.begin() + static_cast<std::ptrdiff_t>(d * bins);
      auto last = std::remove_if(first, first + static_cast<std::ptrdiff_t>(bins),
                                 [&](std::uint32_t k) { return k == a || k == b; });
      for (const std::uint32_t k : {a, b}) {
        const auto at = std::lower_bound(first, last, k, lighter_in(d));
        std::move_backward(at, last, last + 1);
        *at = k;
        ++last;
      }
    }
  };
  std::size_t steps = 0;
  for (;;) {
    std::size_t bottleneck = 0;
    for (std::size_t k = 1; k < bins; ++k)
      if (peaks[k] > peaks[bottleneck]) bottleneck = k;
    const double makespan = peaks[bottleneck];
    if (makespan <= good_enough) break;
    std::size_t dimension = 0;
    const double* l = state.load(bottleneck);
    for (std::size_t d = 1; d < dimensions; ++d)
      if (l[d] > l[dimension]) dimension = d;
    const double cut = makespan * (1 - relative_tolerance);
    const std::uint32_t* order = sorted.data() + dimension * bins;
    bool stepped = false;
    for (std::size_t r = 0; r < bins && !stepped; ++r) {
      const std::uint32_t partner = order[r];
      if (partner == bottleneck) continue;
      const descent_step step = dimensions == 2   ? best_descent_step<2>(state, bottleneck, partner, cut, scratch)
                                : dimensions == 1 ? best_descent_step<1>(state, bottleneck, partner, cut, scratch)
                                                  : best_descent_step<0>(state, bottleneck, partner, cut, scratch);
      if (step.out == no_bin) continue;
      if (step.in == no_bin)
        state.move(step.out, partner);
      else
        state.swap(step.out, step.in);
      peaks[bottleneck] = state.peak(bottleneck);
      peaks[partner] = state.peak(partner);
      reorder(static_cast<std::uint32_t>(bottleneck), partner);
      ++steps;
      stepped = true;
    }
    if (!stepped) break;
  }
  return steps;
}

//! Fills `state` (empty) with the LPT start: `greedy_fill` with `candidates`,
//! then the caps enforced and empty bins filled, as `lpt_packer` does. Expects
//! `order_by_decreasing_size` in the workspace; throws `infeasible_error` naming
//! `packer` when the caps cannot be met from this start.
inline void lpt_start(bin_state& state, std::size_t candidates, std::string_view packer) {
  greedy_fill(state, candidates);
  enforce_caps(state, packer);
  fill_empty_bins(state);
}

//! The reference local search: the LPT start (`candidates` least-loaded bins per
//! sample; 0 picks `lpt_start_candidates(bins)`, the start `refined_packer`
//! uses), then `bottleneck_descent` to a local optimum; writes `result` like a
//! packer. `refined_packer` is never worse than this where N <=
//! `descent_sample_limit`. Throws like `lpt_packer` (`input_error`, and
//! `infeasible_error` when the LPT start cannot meet the caps).
inline void lpt_descent(const cost_matrix& costs, std::size_t bins, const pack_options& options,
                        pack_workspace& workspace, packing& result, std::size_t candidates = 0) {
  check_request(costs, bins, options);
  bin_state state(costs, bins, options.caps, workspace);
  order_by_decreasing_size(costs, workspace);
  lpt_start(state, candidates ? candidates : lpt_start_candidates(bins), "lpt_descent");
  const double bound = lower_bound(costs, bins, workspace.scratch);
  bottleneck_descent(state, bound);
  write_packing(state, result, bound);
}

}  // namespace dflop::detail
