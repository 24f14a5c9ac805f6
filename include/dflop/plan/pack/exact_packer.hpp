// SPDX-License-Identifier: Apache-2.0
//! \file
//! Branch and bound for small instances: the true optimum, to measure the
//! heuristics' real gaps in tests and benchmarks.
#pragma once

#include <dflop/error.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/pack/refined_packer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! The exact packer gave up: its node limit was reached before optimality was proven.
class search_limit_error : public error {
public:
  using error::error;
};

namespace detail {

//! Depth-first branch and bound: samples largest first, each tried in every bin
//! (lowest resulting peak first) except bins identical to one already tried
//! (same loads and caps; this also makes empty bins interchangeable). A branch
//! dies when its peak reaches the best makespan found, when a cap overflows, or
//! when fewer samples remain than empty bins. The incumbent starts from
//! `refined_packer`, and the search stops early at the lower bound.
class exact_search {
public:
  exact_search(bin_state& state, double incumbent, double bound, std::uint64_t node_limit)
      : state_(state), best_(incumbent), bound_(bound), node_limit_(node_limit) {
    pack_workspace& work = state_.workspace();
    order_by_decreasing_size(state_.costs(), work);
    order_.assign(work.order.begin(), work.order.end());
    choices_.resize(state_.samples() * state_.bins());
    peaks_.resize(state_.samples() * state_.bins());
  }

  //! Runs the search; true when it improved on the incumbent (then the best
  //! assignment is in `workspace().saved_bin_of`).
  bool run() {
    search(0, 0.0, state_.bins());
    return improved_;
  }

private:
  bool same_bin(std::size_t a, std::size_t b) const {
    const pack_workspace& work = state_.workspace();
    for (std::size_t d = 0; d < state_.dimensions(); ++d)
      if (state_.load(a)[d] != state_.load(b)[d]) return false;
    const std::size_t capped = state_.caps() ? state_.caps()->limits.size() : 0;
    for (std::size_t c = 0; c < capped; ++c)
      if (work.cap_loads[a * capped + c] != work.cap_loads[b * capped + c]) return false;
    return state_.items(a).empty() == state_.items(b).empty();
  }

  void search(std::size_t depth, double current, std::size_t empty) {
    if (done_) return;
    if (++nodes_ > node_limit_)
      throw search_limit_error("exact_packer: node limit of " + std::to_string(node_limit_) +
                               " reached before optimality was proven (use fewer samples or raise node_limit)");
    const std::size_t n = state_.samples();
    if (depth == n) {
      if (current < best_) {
        best_ = current;
        improved_ = true;
        state_.workspace().saved_bin_of = state_.workspace().bin_of;
        if (best_ <= bound_ * (1 + relative_tolerance)) done_ = true;
      }
      return;
    }
    if (empty > n - depth) return;
    const std::size_t sample = order_[depth];
    const std::size_t bins = state_.bins();
    std::uint32_t* choice = choices_.data() + depth * bins;
    double* peak = peaks_.data() + depth * bins;
    std::size_t count = 0;
    const double cut = best_ * (1 - relative_tolerance);
    for (std::size_t k = 0; k < bins; ++k) {
      const double after = std::max(current, state_.peak_with(k, sample));
      if (after >= cut || !state_.fits(k, sample)) continue;
      bool duplicate = false;
      for (std::size_t c = 0; c < count && !duplicate; ++c) duplicate = same_bin(choice[c], k);
      if (duplicate) continue;
      choice[count] = static_cast<std::uint32_t>(k);
      peak[k] = after;
      ++count;
    }
    std::sort(choice, choice + count, [&](std::uint32_t a, std::uint32_t b) { return peak[a] != peak[b] ? peak[a] < peak[b] : a < b; });
    for (std::size_t c = 0; c < count && !done_; ++c) {
      const std::size_t k = choice[c];
      if (peak[k] >= best_ * (1 - relative_tolerance)) break;  // the incumbent improved meanwhile
      const bool was_empty = state_.items(k).empty();
      state_.assign(sample, k);
      search(depth + 1, peak[k], empty - (was_empty ? 1 : 0));
      unassign(sample, k);
    }
  }

  void unassign(std::size_t sample, std::size_t bin) { state_.remove_last(sample, bin); }

  bin_state& state_;
  double best_;
  double bound_;
  std::uint64_t node_limit_;
  std::uint64_t nodes_ = 0;
  bool improved_ = false;
  bool done_ = false;
  std::vector<std::uint32_t> order_;
  std::vector<std::uint32_t> choices_;
  std::vector<double> peaks_;
};

}  // namespace detail

//! Optimal packings by branch and bound, for small N (tests, benchmarks of the
//! heuristics' true gaps). Exponential in N: refuses more than `max_samples`
//! samples and throws `search_limit_error` after `node_limit` nodes. With caps
//! it proves infeasibility (`infeasible_error`) when no packing exists.
struct exact_packer {
  //! Name used by tools and reports.
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "exact"; }
  //! Largest N accepted.
  std::size_t max_samples = 32;
  //! Most search nodes before giving up.
  std::uint64_t node_limit = 20'000'000;

  //! Packs `costs` into `bins` bins optimally (see `dflop::packer`).
  void pack(const cost_matrix& costs, std::size_t bins, const pack_options& options, pack_workspace& workspace,
            packing& result) const {
    detail::check_request(costs, bins, options);
    if (costs.samples() > max_samples)
      throw input_error("exact_packer", 0,
                        std::to_string(costs.samples()) + " samples exceed its limit of " + std::to_string(max_samples));
    double incumbent = std::numeric_limits<double>::infinity();
    bool have_incumbent = false;
    try {
      packing start;
      refined_packer{}.pack(costs, bins, options, workspace, start);
      incumbent = start.makespan;
      workspace.saved_bin_of.assign(start.bin_of.begin(), start.bin_of.end());
      have_incumbent = true;
    } catch (const infeasible_error&) {
      // The heuristics found nothing within the caps; the search decides.
    }
    detail::bin_state state(costs, bins, options.caps, workspace);
    const double bound = detail::lower_bound(costs, bins, workspace.scratch);
    detail::exact_search search(state, incumbent, bound, node_limit);
    const bool improved = search.run();
    if (!improved && !have_incumbent)
      throw infeasible_error("exact_packer: no packing satisfies the per-bin caps (proven by exhaustive search)");
    state.load_assignment(workspace.saved_bin_of);
    detail::write_packing(state, result, bound);
  }

  //! Same settings.
  friend bool operator==(const exact_packer&, const exact_packer&) = default;
};
static_assert(packer<exact_packer>);

}  // namespace dflop
