// SPDX-License-Identifier: Apache-2.0
//! \file
//! The default packer: the better of Karmarkar-Karp and LPT, then local search
//! (moves and swaps out of the bottleneck bin) until the lower bound is reached
//! or the budget runs out. Never worse than its start, nor (for N <=
//! `detail::descent_sample_limit`) than `detail::lpt_descent`.
#pragma once

#include <dflop/plan/pack/karmarkar_karp_packer.hpp>
#include <dflop/plan/pack/lpt_descent.hpp>
#include <dflop/plan/pack/lpt_packer.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/util/random.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>
#include <string_view>

namespace dflop {

namespace detail {

//! Local search settings (see `refined_packer`).
struct local_search_budget {
  std::size_t iterations;     //!< most improving steps
  double seconds;             //!< wall-clock limit, 0: none
  std::size_t partners;       //!< lightest bins tried per step (large K)
  std::size_t random_partners;//!< random bins tried per step (large K)
  std::size_t window;         //!< most samples of a bin examined per step
  std::size_t perturbations;  //!< random restarts after the descent stalls
  double target_gap;          //!< stop at lower bound x (1 + target_gap)
};

//! The bottleneck search of `refined_packer`, over a `bin_state`. Bin peaks sit
//! in a tournament tree, so finding the bottleneck is O(1) and a step updates it
//! in O(log K); a step examines at most `window` samples per bin, gathered into
//! contiguous scratch, so its cost does not grow with N / K.
class local_search {
public:
  local_search(bin_state& state, double bound, const local_search_budget& budget, std::uint64_t seed)
      : state_(state), work_(state.workspace()), budget_(budget), random_(seed),
        good_enough_(bound * (1 + std::max(budget.target_gap, relative_tolerance))),
        start_(std::chrono::steady_clock::now()) {
    budget_.window = std::max<std::size_t>(budget_.window, 1);
    rebuild_tree();
  }

  //! Descends; then, while the bound is not reached, perturbs and descends again
  //! (keeping the best), up to `perturbations` times. Never ends worse than it started.
  void run() {
    descend();
    if (budget_.perturbations == 0 || makespan() <= good_enough_ || out_of_budget()) return;
    double best = makespan();
    work_.saved_bin_of = work_.bin_of;
    for (std::size_t round = 0; round < budget_.perturbations && best > good_enough_ && !out_of_budget(); ++round) {
      perturb();
      descend();
      const double now = makespan();
      if (now < best) {
        best = now;
        work_.saved_bin_of = work_.bin_of;
      } else if (now > best) {
        restore();
      }
    }
    if (makespan() > best) restore();
  }

private:
  [[nodiscard]] double makespan() const { return work_.peaks[work_.tree[1]]; }

  void restore() {
    state_.load_assignment(work_.saved_bin_of);
    rebuild_tree();
  }

  void rebuild_tree() {
    const std::size_t bins = state_.bins();
    leaves_ = 1;
    while (leaves_ < bins) leaves_ *= 2;
    work_.peaks.assign(bins + 1, -1.0);  // entry `bins` is a sentinel below every peak
    for (std::size_t k = 0; k < bins; ++k) work_.peaks[k] = state_.peak(k);
    work_.tree.assign(2 * leaves_, static_cast<std::uint32_t>(bins));
    for (std::size_t k = 0; k < bins; ++k) work_.tree[leaves_ + k] = static_cast<std::uint32_t>(k);
    for (std::size_t node = leaves_ - 1; node >= 1; --node) work_.tree[node] = higher(work_.tree[2 * node], work_.tree[2 * node + 1]);
  }
  [[nodiscard]] std::uint32_t higher(std::uint32_t a, std::uint32_t b) const {
    const double x = work_.peaks[a], y = work_.peaks[b];
    return x != y ? (x > y ? a : b) : std::min(a, b);
  }
  void refresh(std::size_t bin) {
    work_.peaks[bin] = state_.peak(bin);
    for (std::size_t node = (leaves_ + bin) / 2; node >= 1; node /= 2)
      work_.tree[node] = higher(work_.tree[2 * node], work_.tree[2 * node + 1]);
  }

  bool out_of_budget() {
    if (steps_ >= budget_.iterations) return true;
    return budget_.seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > budget_.seconds;
  }

  //! Improving steps out of the bottleneck until none is found: when windows or
  //! partners are sampled, a failed step is retried once with fresh samples and
  //! once against every bin before the descent gives up.
  void descend() {
    std::size_t failures = 0;
    while (steps_ < budget_.iterations) {
      if (budget_.seconds > 0 && (steps_ & 31) == 0 && out_of_budget()) return;
      const std::size_t bottleneck = work_.tree[1];
      const double peak = work_.peaks[bottleneck];
      if (peak <= good_enough_) return;
      ++steps_;
      const bool sampled = choose_partners(bottleneck, failures >= 2);
      const bool improved = state_.dimensions() == 2 ? improve<2>(bottleneck, peak)
                            : state_.dimensions() == 1 ? improve<1>(bottleneck, peak)
                                                       : improve<0>(bottleneck, peak);
      if (improved) {
        failures = 0;
        continue;
      }
      if (!sampled || ++failures > 2) return;
    }
  }

  //! Fills `more_indices` with partners, lightest in the bottleneck's peak dimension
  //! first (every other bin when K is small or `every_bin`); true when windows or
  //! partners are sampled.
  bool choose_partners(std::size_t bottleneck, bool every_bin) {
    const std::size_t bins = state_.bins();
    std::size_t dimension = 0;
    const double* l = state_.load(bottleneck);
    for (std::size_t d = 1; d < state_.dimensions(); ++d)
      if (l[d] > l[dimension]) dimension = d;
    auto lighter = [&](std::uint32_t a, std::uint32_t b) {
      const double x = state_.load(a)[dimension], y = state_.load(b)[dimension];
      return x != y ? x < y : a < b;
    };
    std::vector<std::uint32_t>& partners = work_.more_indices;
    partners.clear();
    const bool all = every_bin || bins - 1 <= budget_.partners + budget_.random_partners;
    if (all) {
      for (std::size_t k = 0; k < bins; ++k)
        if (k != bottleneck) partners.push_back(static_cast<std::uint32_t>(k));
      std::sort(partners.begin(), partners.end(), lighter);
    } else {
      // The lightest bins in this dimension, refreshed every few steps (loads drift slowly).
      std::vector<std::uint32_t>& ranked = work_.indices;
      if (ranked_dimension_ != dimension || steps_ >= rerank_at_) {
        ranked.resize(bins);
        for (std::size_t k = 0; k < bins; ++k) ranked[k] = static_cast<std::uint32_t>(k);
        const auto middle = ranked.begin() + static_cast<std::ptrdiff_t>(budget_.partners + 1);
        std::nth_element(ranked.begin(), middle, ranked.end(), lighter);
        std::sort(ranked.begin(), middle, lighter);
        ranked_dimension_ = dimension;
        rerank_at_ = steps_ + 16;
      }
      for (std::size_t r = 0; r <= budget_.partners && partners.size() < budget_.partners; ++r)
        if (ranked[r] != bottleneck) partners.push_back(ranked[r]);
      for (std::size_t r = 0; r < budget_.random_partners; ++r) {
        const auto pick = static_cast<std::uint32_t>(random_.below(bins));
        if (pick != bottleneck) partners.push_back(pick);
      }
    }
    return !all || every_bin || state_.items(bottleneck).size() > budget_.window;
  }

  //! Copies at most `window` samples of `bin` (from a random start when it holds
  //! more) and their costs to scratch at `offset`; returns how many.
  std::size_t gather(std::size_t bin, std::size_t offset) {
    const auto& items = state_.items(bin);
    const std::size_t size = items.size();
    const std::size_t count = std::min(size, budget_.window);
    std::size_t at = size <= budget_.window ? 0 : random_.below(size);
    const std::size_t dimensions = state_.dimensions();
    for (std::size_t r = 0; r < count; ++r, ++at) {
      if (at == size) at = 0;
      const std::uint32_t sample = items[at];
      work_.window_samples[offset + r] = sample;
      const double* x = state_.cost(sample);
      for (std::size_t d = 0; d < dimensions; ++d) work_.window_costs[(offset + r) * dimensions + d] = x[d];
    }
    return count;
  }

  //! Partner by partner (lightest first), the best move or swap that leaves both
  //! bins strictly below `peak`; applies the first partner's best. False when none.
  //! `Dims` is the number of dimensions when known at compile time, else 0.
  template <std::size_t Dims>
  bool improve(std::size_t bottleneck, double peak) {
    const std::size_t dimensions = Dims ? Dims : state_.dimensions();
    const std::size_t window = budget_.window;
    work_.window_samples.resize(2 * window);
    work_.window_costs.resize(2 * window * dimensions);
    const std::size_t mine_count = gather(bottleneck, 0);
    const bool can_move = state_.items(bottleneck).size() > 1;
    const double* mine = work_.window_costs.data();
    const double* their = mine + window * dimensions;
    const double* mine_load = state_.load(bottleneck);
    const double cut = peak * (1 - relative_tolerance);
    const bool capped = state_.caps() != nullptr;
    for (std::uint32_t c : work_.more_indices) {
      const std::size_t their_count = gather(c, window);
      const double* their_load = state_.load(c);
      double best = cut;
      std::size_t best_out = no_bin, best_in = no_bin;
      for (std::size_t x = 0; x < mine_count; ++x) {
        const double* xi = mine + x * dimensions;
        if (can_move) {
          double value = 0;
          for (std::size_t d = 0; d < dimensions; ++d)
            value = std::max(value, std::max(mine_load[d] - xi[d], their_load[d] + xi[d]));
          if (value < best && (!capped || state_.fits(c, work_.window_samples[x]))) best = value, best_out = x, best_in = no_bin;
        }
        for (std::size_t y = 0; y < their_count; ++y) {
          const double* xj = their + y * dimensions;
          double mine_after = 0;
          for (std::size_t d = 0; d < dimensions; ++d) mine_after = std::max(mine_after, mine_load[d] - xi[d] + xj[d]);
          if (mine_after >= best) continue;
          double value = mine_after;
          for (std::size_t d = 0; d < dimensions; ++d) value = std::max(value, their_load[d] - xj[d] + xi[d]);
          if (value >= best) continue;
          if (capped && !(state_.fits(c, work_.window_samples[x], work_.window_samples[window + y]) &&
                          state_.fits(bottleneck, work_.window_samples[window + y], work_.window_samples[x])))
            continue;
          best = value, best_out = x, best_in = y;
        }
      }
      if (best_out == no_bin) continue;
      if (best_in == no_bin)
        state_.move(work_.window_samples[best_out], c);
      else
        state_.swap(work_.window_samples[best_out], work_.window_samples[window + best_in]);
      refresh(bottleneck);
      refresh(c);
      return true;
    }
    return false;
  }

  //! A few random swaps between random bins (within the caps): a kick out of a
  //! local optimum. Swaps keep every bin non-empty.
  void perturb() {
    const std::size_t bins = state_.bins();
    for (int kick = 0; kick < 3; ++kick) {
      const std::size_t a = random_.below(bins), b = random_.below(bins);
      if (a == b) continue;
      const auto& items_a = state_.items(a);
      const auto& items_b = state_.items(b);
      const std::uint32_t i = items_a[random_.below(items_a.size())];
      const std::uint32_t j = items_b[random_.below(items_b.size())];
      if (!state_.fits(b, i, j) || !state_.fits(a, j, i)) continue;
      state_.swap(i, j);
      refresh(a);
      refresh(b);
    }
  }

  bin_state& state_;
  pack_workspace& work_;
  local_search_budget budget_;
  random_generator random_;
  double good_enough_;
  std::chrono::steady_clock::time_point start_;
  std::size_t leaves_ = 1;
  std::size_t steps_ = 0;
  std::size_t ranked_dimension_ = no_bin;
  std::size_t rerank_at_ = 0;
};

}  // namespace detail

//! The default packer: starts from the better of `karmarkar_karp_packer` and
//! `lpt_packer`, then repeatedly takes the bottleneck bin and applies the best
//! move or swap that brings it and its partner below the current makespan
//! (partners: all bins when K is small, else the lightest bins in the
//! bottleneck dimension plus a few random ones, drawn from the seed). Stops at
//! the lower bound, when no step pays, or at the budget; small batches then get
//! perturb-and-descend rounds. The makespan never rises.
//!
//! Where N <= `detail::descent_sample_limit`, the LPT start is first taken to a
//! local optimum by the exhaustive descent of `detail::lpt_descent` (outside the
//! budgets below), and the result is never worse than that descent's: the
//! search continues from it, and if it started from Karmarkar-Karp instead and
//! ends worse, the descent's packing is returned.
struct refined_packer {
  //! Name used by tools and reports.
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "refined"; }
  //! Most local-search steps; 0 picks 4 N + 256. (The LPT descent is not counted.)
  std::size_t iteration_budget = 0;
  //! Wall-clock limit of the local search in seconds; 0 means none. A limit
  //! makes the result depend on timing, so it is off by default. The LPT
  //! descent (N <= `detail::descent_sample_limit`) runs to its end regardless.
  double time_budget_seconds = 0;
  //! Lightest bins tried as partners per step when K is large.
  std::size_t partners = 24;
  //! Random bins added to those partners per step.
  std::size_t random_partners = 8;
  //! Most samples of a bin examined per step (a random window of larger bins).
  std::size_t window = 48;
  //! Perturb-and-descend rounds after the first descent stalls; 0 picks 300
  //! when N <= 64 (cheap there, and small batches need it), else none.
  std::size_t perturbations = 0;
  //! Stop once makespan <= lower bound x (1 + target_gap).
  double target_gap = 1e-5;

  //! Packs `costs` into `bins` bins (see `dflop::packer`).
  void pack(const cost_matrix& costs, std::size_t bins, const pack_options& options, pack_workspace& workspace,
            packing& result) const {
    detail::check_request(costs, bins, options);
    double start = std::numeric_limits<double>::infinity();
    std::optional<infeasible_error> failure;
    detail::order_by_decreasing_size(costs, workspace);  // shared by both starts
    {  // Start 1: Karmarkar-Karp.
      detail::bin_state state(costs, bins, options.caps, workspace);
      try {
        detail::differencing_fill(state);
        detail::enforce_caps(state, name());
        detail::fill_empty_bins(state);
        start = state.makespan();
        workspace.saved_bin_of = workspace.bin_of;
      } catch (const infeasible_error& error) {
        failure = error;
      }
    }
    detail::bin_state state(costs, bins, options.caps, workspace);
    const bool descend = costs.samples() <= detail::descent_sample_limit;
    double descended = std::numeric_limits<double>::infinity();  // the LPT descent's makespan, if run
    bool at_descent = false;  // the state is the descent's local optimum
    double bound = 0;
    try {  // Start 2: LPT (as `lpt_descent` starts); keep the better.
      detail::lpt_start(state, detail::lpt_start_candidates(bins), name());
      bound = detail::lower_bound(costs, bins, workspace.scratch);
      if (descend) {
        // The simple local search this packer must never lose to, run from this
        // very start (`lpt_descent`); it is exhaustive, so the search below
        // starts from a local optimum of its own neighbourhood when it starts here.
        detail::bottleneck_descent(state, bound);
        descended = state.makespan();
        workspace.descent_bin_of = workspace.bin_of;
        at_descent = true;
      }
      if (state.makespan() >= start) {
        state.load_assignment(workspace.saved_bin_of);
        at_descent = false;
      }
    } catch (const infeasible_error&) {
      if (failure) {  // neither balanced start meets the caps: fill by the caps first
        state.clear();
        detail::cap_first_fill(state, name());
        detail::enforce_caps(state, name());
        detail::fill_empty_bins(state);
      } else {
        state.load_assignment(workspace.saved_bin_of);
      }
      bound = detail::lower_bound(costs, bins, workspace.scratch);
    }
    const std::size_t iterations = iteration_budget ? iteration_budget : 4 * costs.samples() + 256;
    const std::size_t rounds = perturbations ? perturbations : (costs.samples() <= 64 ? 300 : 0);
    // From the descent's local optimum the search's steps (a subset of the
    // descent's, same acceptance) find nothing: only perturbation rounds can help.
    if (rounds > 0 || !at_descent) {
      detail::local_search search(
          state, bound, {iterations, time_budget_seconds, partners, random_partners, window, rounds, target_gap},
          options.seed);
      search.run();
    }
    // The search never raises its start's makespan, but from Karmarkar-Karp it
    // may end above the descent (and reloading an assignment may move the last
    // bit): then the descent's packing is returned as it is.
    if (state.makespan() > descended) state.load_assignment(workspace.descent_bin_of);
    detail::write_packing(state, result, bound);
  }

  //! Same settings.
  friend bool operator==(const refined_packer&, const refined_packer&) = default;
};
static_assert(packer<refined_packer>);

}  // namespace dflop
