// SPDX-License-Identifier: Apache-2.0
//! \file
//! ZB-H1 ("Zero Bubble Pipeline Parallelism", Qi et al., 2024): the backward is
//! split into B (input gradient, on the critical path) and W (weight gradient, free
//! to move). Forwards and Bs keep 1F1B's order, so activations in flight are 1F1B's;
//! W passes are deferred on later stages, so Bs travel back to the first stage
//! without waiting behind Ws, and the deferred Ws fill the drain. With F = B = W
//! the bubble is (S-1)(F+B-2W) = a third of 1F1B's (S-1)(F+B+W).
#pragma once

#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/one_f_one_b.hpp>
#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <string_view>

namespace dflop {

//! ZB-H1: 1F1B's F/B order; stage s defers its W passes by s steady steps (the W of
//! microbatch j follows the B of microbatch j + s), runs one W after each drain B
//! and the remaining Ws last.
struct zero_bubble_h1 {
  //! "zb-h1".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "zb-h1"; }

  //! How many Ws `rank` keeps deferred during the steady state.
  [[nodiscard]] static constexpr std::uint32_t deferred(const schedule_shape& shape, std::uint32_t rank) noexcept {
    return std::min(rank, shape.microbatches);
  }

  //! The op lists for `shape`.
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    detail::require_positive_shape(shape, name());
    auto result = detail::empty_schedule(name(), shape, 1, true);
    const std::uint32_t m = shape.microbatches;
    for (std::uint32_t rank = 0; rank < shape.ranks; ++rank) {
      auto& ops = result.rank_ops[rank];
      const std::uint32_t warm = one_f_one_b::warmup(shape, rank);
      const std::uint32_t lag = deferred(shape, rank);
      std::uint32_t next_weight = 0;  // Ws run in microbatch order
      std::uint32_t backwards_done = 0;
      for (std::uint32_t j = 0; j < warm; ++j) ops.push_back({op_kind::forward, j, rank, 0});
      for (std::uint32_t j = warm; j < m; ++j) {
        ops.push_back({op_kind::forward, j, rank, 0});
        ops.push_back({op_kind::backward, j - warm, rank, 0});
        ++backwards_done;
        if (backwards_done > lag) ops.push_back({op_kind::weight, next_weight++, rank, 0});
      }
      for (std::uint32_t j = m - warm; j < m; ++j) {
        ops.push_back({op_kind::backward, j, rank, 0});
        ops.push_back({op_kind::weight, next_weight++, rank, 0});
      }
      while (next_weight < m) ops.push_back({op_kind::weight, next_weight++, rank, 0});
    }
    return result;
  }

  friend bool operator==(const zero_bubble_h1&, const zero_bubble_h1&) = default;
};
static_assert(schedule<zero_bubble_h1>);

}  // namespace dflop
