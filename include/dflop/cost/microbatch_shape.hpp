// SPDX-License-Identifier: Apache-2.0
//! \file
//! The three numbers a microbatch's cost in one module depends on. Linear work
//! follows the token count; attention follows the sum of squared lengths of the
//! attention units (LLM: each packed sample, variable-length attention; encoder:
//! each item, a tile or frame), never the square of the packed length.
#pragma once

#include <dflop/model/module_kind.hpp>
#include <dflop/workload/sample.hpp>

#include <ostream>
#include <span>

namespace dflop {

//! A microbatch as one module sees it.
struct microbatch_shape {
  double units = 0;           //!< attention units: LLM samples, or encoder items
  double tokens = 0;          //!< tokens over all units
  double squared_tokens = 0;  //!< sum over units of (tokens in the unit)^2

  friend bool operator==(const microbatch_shape&, const microbatch_shape&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const microbatch_shape& shape) {
  return out << "microbatch_shape{units=" << shape.units << ", tokens=" << shape.tokens
             << ", squared_tokens=" << shape.squared_tokens << "}";
}

//! The shape of `microbatch` in module `kind`. LLM: one unit per sample of
//! `llm_tokens`. Encoder: a sample's `encoder_tokens` split evenly over its
//! `encoder_items`, so it adds items units and tokens^2 / items squared tokens;
//! text samples add nothing.
[[nodiscard]] inline microbatch_shape shape_of(module_kind kind, std::span<const sample> microbatch) noexcept {
  microbatch_shape shape;
  for (const sample& s : microbatch) {
    if (kind == module_kind::llm) {
      const auto n = static_cast<double>(s.llm_tokens);
      shape.units += 1;
      shape.tokens += n;
      shape.squared_tokens += n * n;
    } else if (s.encoder_items > 0) {
      const auto items = static_cast<double>(s.encoder_items);
      const auto n = static_cast<double>(s.encoder_tokens);
      shape.units += items;
      shape.tokens += n;
      shape.squared_tokens += n * n / items;
    }
  }
  return shape;
}

//! `count` units of `tokens_per_unit` tokens each (one long sequence, or a batch of equal tiles).
[[nodiscard]] constexpr microbatch_shape uniform_shape(double count, double tokens_per_unit) noexcept {
  return {count, count * tokens_per_unit, count * tokens_per_unit * tokens_per_unit};
}

}  // namespace dflop
