// SPDX-License-Identifier: Apache-2.0
//! \file
//! What repeated measurements of one thing say: the median (robust to the odd
//! slow run) and the spread (extremes and quartiles).
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <span>
#include <vector>

namespace dflop {

//! Order statistics of repeated measurements (seconds, bytes, ...).
struct timing_summary {
  double median = 0;          //!< middle value (mean of the two middle ones for an even count)
  double minimum = 0;         //!< smallest value
  double maximum = 0;         //!< largest value
  double lower_quartile = 0;  //!< 25th percentile (linear interpolation between order statistics)
  double upper_quartile = 0;  //!< 75th percentile (linear interpolation between order statistics)
  std::size_t samples = 0;    //!< how many values were summarized

  //! upper_quartile - lower_quartile.
  [[nodiscard]] constexpr double interquartile_range() const noexcept { return upper_quartile - lower_quartile; }
  //! Interquartile range over the median: a unit-free spread (0 when the median is 0).
  [[nodiscard]] constexpr double relative_spread() const noexcept {
    return median > 0 ? interquartile_range() / median : 0.0;
  }

  friend bool operator==(const timing_summary&, const timing_summary&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const timing_summary& summary) {
  return out << "timing_summary{median=" << summary.median << ", min=" << summary.minimum
             << ", q1=" << summary.lower_quartile << ", q3=" << summary.upper_quartile << ", max=" << summary.maximum
             << ", samples=" << summary.samples << "}";
}

//! The q-quantile (q in [0, 1]) of sorted `values`: linear interpolation at position q (n - 1).
[[nodiscard]] inline double sorted_quantile(std::span<const double> sorted, double q) noexcept {
  if (sorted.empty()) return 0;
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

//! Summarizes `values` (any order). \throws dflop::error when empty or when a value is not finite.
[[nodiscard]] inline timing_summary summarize(std::span<const double> values) {
  if (values.empty()) throw error("summarize: no measurements to summarize");
  std::vector<double> sorted(values.begin(), values.end());
  for (std::size_t i = 0; i < sorted.size(); ++i)
    if (!std::isfinite(sorted[i]))
      throw error("summarize: measurement " + std::to_string(i) + " is not a finite number");
  std::sort(sorted.begin(), sorted.end());
  return {sorted_quantile(sorted, 0.5), sorted.front(),          sorted.back(),
          sorted_quantile(sorted, 0.25), sorted_quantile(sorted, 0.75), sorted.size()};
}

}  // namespace dflop
