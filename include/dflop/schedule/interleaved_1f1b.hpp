// SPDX-License-Identifier: Apache-2.0
//! \file
//! Interleaved 1F1B (Megatron-LM's virtual pipeline): each rank holds v model
//! chunks (stages c * S + r), which cuts the bubble to (S-1)/(v m) of the ideal
//! time at the price of v times more messages.
#pragma once

#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/one_f_one_b.hpp>
#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dflop {

//! Interleaved 1F1B in Megatron's order. Forward k on a rank visits microbatches in
//! groups of S: for each group, chunk 0 for its microbatches, then chunk 1, ...;
//! backward k mirrors it from the last chunk. Rank r runs min(2(S-1-r) + (v-1) S,
//! v m) warm-up forwards, then alternates forward and backward, then drains.
//! With v > 1 it needs m to be a multiple of S, as Megatron's original schedule
//! (with a shorter last group, this order deadlocks for some shapes and loses the
//! published bubble); with v = 1 it is exactly `one_f_one_b`.
struct interleaved_1f1b {
  std::uint32_t chunks = 2;  //!< model chunks per rank v >= 1

  //! "interleaved".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "interleaved"; }

  //! Warm-up forwards on `rank` (Megatron's count, capped by v m).
  [[nodiscard]] std::uint32_t warmup(const schedule_shape& shape, std::uint32_t rank) const noexcept {
    const std::uint32_t total = shape.microbatches * chunks;
    return std::min(2 * (shape.ranks - 1 - rank) + (chunks - 1) * shape.ranks, total);
  }

  //! The op lists for `shape`.
  [[nodiscard]] pipeline_schedule make(const schedule_shape& shape) const {
    detail::require_positive_shape(shape, name());
    if (chunks == 0) throw schedule_error("interleaved: needs at least one chunk per rank");
    if (chunks == 1) {
      auto plain = one_f_one_b{}.make(shape);
      plain.name = std::string(name());
      return plain;
    }
    if (shape.microbatches % shape.ranks != 0) {
      std::string text("interleaved: with ");
      text.append(std::to_string(chunks)).append(" chunks per rank the microbatches (m=");
      text.append(std::to_string(shape.microbatches)).append(") must be a multiple of the stages (S=");
      text.append(std::to_string(shape.ranks)).append(")");
      throw schedule_error(text);
    }
    const std::uint32_t S = shape.ranks;
    const std::uint32_t m = shape.microbatches;
    // Megatron-core's schedule table: (microbatch, chunk) of the k-th forward.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> table;
    table.reserve(static_cast<std::size_t>(m) * chunks);
    for (std::uint32_t group = 0; group < m; group += S)
      for (std::uint32_t chunk = 0; chunk < chunks; ++chunk)
        for (std::uint32_t j = group; j < std::min(group + S, m); ++j) table.emplace_back(j, chunk);

    auto result = detail::empty_schedule(name(), shape, chunks, false);
    const auto total = static_cast<std::uint32_t>(table.size());
    for (std::uint32_t rank = 0; rank < S; ++rank) {
      auto& ops = result.rank_ops[rank];
      const auto forward = [&](std::uint32_t k) {
        const auto [j, chunk] = table[k];
        ops.push_back({op_kind::forward, j, chunk * S + rank, chunk});
      };
      const auto backward = [&](std::uint32_t k) {
        const auto [j, forward_chunk] = table[k];
        const std::uint32_t chunk = chunks - 1 - forward_chunk;
        ops.push_back({op_kind::backward, j, chunk * S + rank, chunk});
      };
      const std::uint32_t warm = warmup(shape, rank);
      for (std::uint32_t k = 0; k < warm; ++k) forward(k);
      for (std::uint32_t k = 0; k + warm < total; ++k) {
        forward(k + warm);
        backward(k);
      }
      for (std::uint32_t k = total - warm; k < total; ++k) backward(k);
    }
    return result;
  }

  friend bool operator==(const interleaved_1f1b&, const interleaved_1f1b&) = default;
};
static_assert(schedule<interleaved_1f1b>);

}  // namespace dflop
