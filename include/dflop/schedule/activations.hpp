// SPDX-License-Identifier: Apache-2.0
//! \file
//! Activation memory a schedule implies: how many (microbatch, chunk) activations
//! each rank holds at once. A forward stores one; its B (input gradient) frees it.
#pragma once

#include <dflop/schedule/op.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dflop {

//! Peak number of (microbatch, chunk) activations held at once on each rank:
//! the maximum over its op list of forwards run minus backwards (B) run. 1F1B gives
//! min(S - s, m) on stage s; GPipe gives m.
//! Writes into `peaks` (reusing its storage).
inline void peak_activations(const pipeline_schedule& schedule, std::vector<std::uint32_t>& peaks) {
  peaks.assign(schedule.rank_ops.size(), 0);
  for (std::size_t rank = 0; rank < schedule.rank_ops.size(); ++rank) {
    std::uint32_t held = 0;
    for (const auto& op : schedule.rank_ops[rank]) {
      if (op.kind == op_kind::forward) peaks[rank] = std::max(peaks[rank], ++held);
      else if (op.kind == op_kind::backward && held > 0) --held;
    }
  }
}

//! Returns a new vector (see the overload above).
[[nodiscard]] inline std::vector<std::uint32_t> peak_activations(const pipeline_schedule& schedule) {
  std::vector<std::uint32_t> peaks;
  peak_activations(schedule, peaks);
  return peaks;
}

}  // namespace dflop
