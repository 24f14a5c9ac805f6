// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a caller may ask of every packer besides the costs and K: a seed and
//! optional per-bin caps (e.g. at most 16k LLM tokens per microbatch, for memory).
#pragma once

#include <dflop/plan/pack/cost_matrix.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dflop {

//! Per-bin capacity constraints: capped quantity c of a bin is the sum of
//! `amounts(i, c)` over its samples and must not exceed `limits[c]`. The
//! quantities need not be cost dimensions (tokens, activation bytes, ...).
struct bin_caps {
  cost_matrix amounts;         //!< N samples x C capped quantities
  std::vector<double> limits;  //!< C limits, one per column of `amounts`

  //! Caps one cost dimension: no bin may sum more than `limit` in `dimension`.
  [[nodiscard]] static bin_caps on_dimension(const cost_matrix& costs, std::size_t dimension, double limit) {
    std::vector<double> column(costs.samples());
    for (std::size_t i = 0; i < costs.samples(); ++i) column[i] = costs(i, dimension);
    return {cost_matrix(costs.samples(), 1, std::move(column)), {limit}};
  }
};

//! Options shared by every packer.
struct pack_options {
  std::uint64_t seed = 0;            //!< same seed, same packing
  const bin_caps* caps = nullptr;    //!< optional constraints (not owned); nullptr: none
};

}  // namespace dflop
