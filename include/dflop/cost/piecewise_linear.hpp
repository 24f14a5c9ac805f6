// SPDX-License-Identifier: Apache-2.0
//! \file
//! A piecewise-linear function through measured points, extended linearly past
//! both ends: the interpolator behind profiled cost tables.
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! One measured point.
struct curve_point {
  double x = 0;  //!< size (tokens, items)
  double y = 0;  //!< measured value (time, bytes)
  friend bool operator==(const curve_point&, const curve_point&) = default;
};

//! Piecewise-linear interpolation through points sorted by x. Between points: the
//! chord; below the first and above the last: the first and last segments
//! extended. A single point gives the line through the origin and that point.
//! Exact at every point; monotone wherever the points are.
class piecewise_linear {
public:
  piecewise_linear() = default;

  //! \throws dflop::error when `points` is empty, has a non-finite value or two equal x.
  explicit piecewise_linear(std::vector<curve_point> points) : points_(std::move(points)) {
    if (points_.empty()) throw error("piecewise_linear: no points");
    std::sort(points_.begin(), points_.end(), [](const curve_point& a, const curve_point& b) { return a.x < b.x; });
    for (std::size_t i = 0; i < points_.size(); ++i) {
      if (!std::isfinite(points_[i].x) || !std::isfinite(points_[i].y))
        throw error("piecewise_linear: non-finite point");
      if (i > 0 && points_[i].x == points_[i - 1].x)
        throw error("piecewise_linear: two points at x = " + std::to_string(points_[i].x));
    }
    if (points_.size() == 1 && points_[0].x == 0) throw error("piecewise_linear: a single point must have x != 0");
  }

  //! The value at `x`.
  [[nodiscard]] double operator()(double x) const noexcept {
    if (points_.empty()) return 0.0;
    if (points_.size() == 1) return points_[0].y / points_[0].x * x;
    // The segment [i-1, i] that holds x, or the end segment to extend.
    auto upper = std::upper_bound(points_.begin(), points_.end(), x,
                                  [](double value, const curve_point& p) { return value < p.x; });
    std::size_t i = static_cast<std::size_t>(upper - points_.begin());
    i = std::clamp<std::size_t>(i, 1, points_.size() - 1);
    const curve_point& a = points_[i - 1];
    const curve_point& b = points_[i];
    if (x == b.x) return b.y;
    return a.y + (b.y - a.y) * ((x - a.x) / (b.x - a.x));
  }

  //! The points, sorted by x.
  [[nodiscard]] std::span<const curve_point> points() const noexcept { return points_; }

  friend bool operator==(const piecewise_linear&, const piecewise_linear&) = default;

private:
  std::vector<curve_point> points_;
};

inline std::ostream& operator<<(std::ostream& out, const piecewise_linear& curve) {
  out << "piecewise_linear{";
  const char* separator = "";
  for (const auto& p : curve.points()) {
    out << separator << "(" << p.x << ", " << p.y << ")";
    separator = ", ";
  }
  return out << "}";
}

}  // namespace dflop
