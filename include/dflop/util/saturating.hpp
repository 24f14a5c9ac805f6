// SPDX-License-Identifier: Apache-2.0
//! \file
//! Byte and token arithmetic that cannot wrap around. A memory estimate of a
//! sample with 10^15 tokens exceeds 2^63 bytes; wrapped, it would read as a
//! small number and the sample would "fit". Saturated at the largest
//! `std::int64_t` (8 EiB, more than any device holds), every comparison with a
//! device's capacity stays right.
#pragma once

#include <cstdint>
#include <limits>

namespace dflop {

//! The value saturating arithmetic stops at: more bytes than any device holds.
inline constexpr std::int64_t saturated_count = std::numeric_limits<std::int64_t>::max();

//! a + b for non-negative counts, `saturated_count` when the sum does not fit.
[[nodiscard]] constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? saturated_count : sum;
}

//! a x b for non-negative counts, `saturated_count` when the product does not fit.
[[nodiscard]] constexpr std::int64_t saturating_mul(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? saturated_count : product;
}

}  // namespace dflop
