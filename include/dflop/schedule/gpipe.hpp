// SPDX-License-Identifier: Apache-2.0
//! \file
//! GPipe: every rank runs all forwards, then all backwards, both in microbatch order.
//! Simple, but holds all m microbatches' activations at once.
#pragma once

#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/op.hpp>

#include <string_view>

namespace dflop {

//! GPipe (all forwards, then all backwards, in microbatch order).
struct gpipe {
  //! "gpipe".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "gpipe"; }

  //! The op lists for `shape`.
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    detail::require_positive_shape(shape, name());
    auto result = detail::empty_schedule(name(), shape, 1, false);
    for (std::uint32_t rank = 0; rank < shape.ranks; ++rank) {
      auto& ops = result.rank_ops[rank];
      for (std::uint32_t j = 0; j < shape.microbatches; ++j) ops.push_back({op_kind::forward, j, rank, 0});
      for (std::uint32_t j = 0; j < shape.microbatches; ++j) ops.push_back({op_kind::backward, j, rank, 0});
    }
    return result;
  }

  friend bool operator==(const gpipe&, const gpipe&) = default;
};
static_assert(schedule<gpipe>);

}  // namespace dflop
