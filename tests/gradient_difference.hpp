// SPDX-License-Identifier: Apache-2.0
//! How far a pipeline's gradients are from the sequential reference's: the
//! largest absolute difference and the largest reference magnitude, so tests
//! can ask for `diff <= tolerance * scale` (relative to the gradient's size).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>

namespace dflop::test {

//! The largest |want| and the largest |got - want| over two equally long gradients.
struct gradient_difference {
  double scale = 0;  //!< max |want[i]|
  double diff = 0;   //!< max |got[i] - want[i]|
};

//! Compares `got` with `want` element by element (the caller checks the sizes match).
[[nodiscard]] inline gradient_difference compare_gradients(std::span<const double> got, std::span<const double> want) {
  gradient_difference out;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    out.scale = std::max(out.scale, std::abs(want[i]));
    out.diff = std::max(out.diff, std::abs(got[i] - want[i]));
  }
  return out;
}

}  // namespace dflop::test
