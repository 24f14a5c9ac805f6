// SPDX-License-Identifier: Apache-2.0
//! \file
//! 1F1B (PipeDream-flush / Megatron's non-interleaved schedule): stage s runs
//! min(S-1-s, m) warm-up forwards, then alternates one forward and one backward,
//! then drains the remaining backwards. Same time as GPipe, but stage s holds at
//! most min(S-s, m) microbatches' activations.
#pragma once

#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <string_view>

namespace dflop {

//! 1F1B: warm-up forwards, one-forward-one-backward steady state, backward drain.
struct one_f_one_b {
  //! "1f1b".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "1f1b"; }

  //! Warm-up forwards on `rank`: min(S-1-rank, m).
  [[nodiscard]] static constexpr std::uint32_t warmup(const schedule_shape& shape, std::uint32_t rank) noexcept {
    return std::min(shape.ranks - 1 - rank, shape.microbatches);
  }

  //! The op lists for `shape`.
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    detail::require_positive_shape(shape, name());
    auto result = detail::empty_schedule(name(), shape, 1, false);
    const std::uint32_t m = shape.microbatches;
    for (std::uint32_t rank = 0; rank < shape.ranks; ++rank) {
      auto& ops = result.rank_ops[rank];
      const std::uint32_t warm = warmup(shape, rank);
      for (std::uint32_t j = 0; j < warm; ++j) ops.push_back({op_kind::forward, j, rank, 0});
      for (std::uint32_t j = warm; j < m; ++j) {
        ops.push_back({op_kind::forward, j, rank, 0});
        ops.push_back({op_kind::backward, j - warm, rank, 0});
      }
      for (std::uint32_t j = m - warm; j < m; ++j) ops.push_back({op_kind::backward, j, rank, 0});
    }
    return result;
  }

  friend bool operator==(const one_f_one_b&, const one_f_one_b&) = default;
};
static_assert(schedule<one_f_one_b>);

}  // namespace dflop
