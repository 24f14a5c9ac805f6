// SPDX-License-Identifier: Apache-2.0
//! \file
//! The data-blind baseline: samples in arrival order, equal counts per bin, as
//! Megatron-style data loaders cut a global batch into microbatches.
#pragma once

#include <dflop/plan/pack/packer.hpp>

#include <cstddef>
#include <string_view>

namespace dflop {

//! Bin k takes samples [k N / K, (k + 1) N / K) in arrival order; costs are
//! ignored. With caps, offending samples are then moved (or swapped) to bins
//! where they fit. O(N + K). The seed is unused.
struct sequential_packer {
  //! Name used by tools and reports.
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "sequential"; }

  //! Packs `costs` into `bins` bins (see `dflop::packer`).
  void pack(const cost_matrix& costs, std::size_t bins, const pack_options& options, pack_workspace& workspace,
            packing& result) const {
    detail::check_request(costs, bins, options);
    detail::bin_state state(costs, bins, options.caps, workspace);
    const std::size_t n = costs.samples();
    for (std::size_t k = 0; k < bins; ++k)
      for (std::size_t i = k * n / bins; i < (k + 1) * n / bins; ++i) state.assign(i, k);
    detail::enforce_caps(state, name());
    detail::fill_empty_bins(state);
    detail::write_packing(state, result);
  }
};
static_assert(packer<sequential_packer>);

}  // namespace dflop
