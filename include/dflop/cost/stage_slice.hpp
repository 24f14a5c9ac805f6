// SPDX-License-Identifier: Apache-2.0
//! \file
//! Which pieces of one module a pipeline stage holds: a number of its layers and,
//! on the first/last stage, its embedding/head.
#pragma once

#include <cstdint>
#include <ostream>

namespace dflop {

//! The part of a module one pipeline stage holds.
struct stage_slice {
  std::int64_t layers = 0;  //!< transformer layers on the stage
  bool embedding = false;   //!< holds the embedding (the module's first stage)
  bool head = false;        //!< holds the projector (encoder) or LM head (LLM) (the module's last stage)

  friend bool operator==(const stage_slice&, const stage_slice&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const stage_slice& slice) {
  return out << "stage_slice{layers=" << slice.layers << ", embedding=" << (slice.embedding ? "true" : "false")
             << ", head=" << (slice.head ? "true" : "false") << "}";
}

//! The slice of layers [first, last) of a module with `total_layers` layers: it holds the
//! embedding when first == 0 and the head when last == total_layers.
[[nodiscard]] constexpr stage_slice layer_range(std::int64_t first, std::int64_t last,
                                                std::int64_t total_layers) noexcept {
  return {last - first, first == 0, last == total_layers};
}

}  // namespace dflop
