// SPDX-License-Identifier: Apache-2.0
//! \file
//! Weighted least squares of `y = a + b x + c x^2`, with fit diagnostics: the
//! model behind fitted cost curves, reusable by a profiler.
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! One observation: value `y` at size `x`, with a least-squares weight.
struct fit_point {
  double x = 0;       //!< size
  double y = 0;       //!< measured value
  double weight = 1;  //!< > 0; 1 / y^2 makes the fit minimize relative error
  friend bool operator==(const fit_point&, const fit_point&) = default;
};

//! `a + b x + c x^2` and how well it fits the points it came from.
struct quadratic_fit {
  double a = 0;                    //!< constant term
  double b = 0;                    //!< linear coefficient
  double c = 0;                    //!< quadratic coefficient
  double r_squared = 0;            //!< 1 - SS_res / SS_tot (unweighted; 1 when all y are equal and fitted)
  double rms_relative_error = 0;   //!< sqrt(mean(((fit - y) / y)^2)) over points with y != 0
  std::size_t points = 0;          //!< observations used

  //! The fitted value at `x`.
  [[nodiscard]] constexpr double operator()(double x) const noexcept { return a + b * x + c * x * x; }

  friend bool operator==(const quadratic_fit&, const quadratic_fit&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const quadratic_fit& fit) {
  return out << "quadratic_fit{a=" << fit.a << ", b=" << fit.b << ", c=" << fit.c << ", r_squared=" << fit.r_squared
             << ", rms_relative_error=" << fit.rms_relative_error << ", points=" << fit.points << "}";
}

//! Fits `a + b x + c x^2` to `points` minimizing sum of weight * residual^2.
//! Solved by Householder QR on the column-scaled design matrix [1, x/s, (x/s)^2]
//! (s = max |x|), in double, so large sizes (8k tokens, squared) stay well conditioned.
//! \throws dflop::error with fewer than 3 distinct x, a non-finite value or a weight <= 0.
[[nodiscard]] inline quadratic_fit fit_quadratic(std::span<const fit_point> points) {
  double scale = 0;
  for (const auto& p : points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y) || !std::isfinite(p.weight) || !(p.weight > 0))
      throw error("fit_quadratic: non-finite value or non-positive weight");
    scale = std::max(scale, std::abs(p.x));
  }
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    bool seen = false;
    for (std::size_t j = 0; j < i && !seen; ++j) seen = points[j].x == points[i].x;
    if (!seen && ++distinct >= 3) break;
  }
  if (distinct < 3)
    throw error("fit_quadratic: need at least 3 distinct sizes, got " + std::to_string(distinct));

  // Rows sqrt(w) [1, u, u^2 | y] with u = x / scale; Householder QR in place, column by column.
  const std::size_t n = points.size();
  std::vector<std::array<double, 4>> rows(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double root = std::sqrt(points[i].weight);
    const double u = points[i].x / scale;
    rows[i] = {root, root * u, root * u * u, root * points[i].y};
  }
  for (std::size_t k = 0; k < 3; ++k) {
    double norm = 0;
    for (std::size_t i = k; i < n; ++i) norm += rows[i][k] * rows[i][k];
    norm = std::sqrt(norm);
    if (norm == 0) throw error("fit_quadratic: singular design (sizes not distinct enough)");
    const double alpha = rows[k][k] > 0 ? -norm : norm;
    // v = column k below the diagonal minus alpha e_k; H = I - 2 v v^T / (v^T v).
    std::vector<double> v(n - k);
    for (std::size_t i = k; i < n; ++i) v[i - k] = rows[i][k];
    v[0] -= alpha;
    double vv = 0;
    for (double e : v) vv += e * e;
    if (vv == 0) continue;
    for (std::size_t j = k; j < 4; ++j) {
      double dot = 0;
      for (std::size_t i = k; i < n; ++i) dot += v[i - k] * rows[i][j];
      const double factor = 2 * dot / vv;
      for (std::size_t i = k; i < n; ++i) rows[i][j] -= factor * v[i - k];
    }
  }
  // Back substitution on the 3x3 upper triangle; a near-zero pivot means a degenerate design.
  const double largest = std::max({std::abs(rows[0][0]), std::abs(rows[1][1]), std::abs(rows[2][2])});
  std::array<double, 3> beta{};
  for (std::size_t k = 3; k-- > 0;) {
    if (std::abs(rows[k][k]) <= 1e-13 * largest) throw error("fit_quadratic: singular design (sizes too close)");
    double sum = rows[k][3];
    for (std::size_t j = k + 1; j < 3; ++j) sum -= rows[k][j] * beta[j];
    beta[k] = sum / rows[k][k];
  }
  quadratic_fit fit{beta[0], beta[1] / scale, beta[2] / (scale * scale), 0, 0, n};

  double mean = 0;
  for (const auto& p : points) mean += p.y;
  mean /= static_cast<double>(n);
  double residual = 0, spread = 0, relative = 0;
  std::size_t relative_count = 0;
  for (const auto& p : points) {
    const double error_at = fit(p.x) - p.y;
    residual += error_at * error_at;
    spread += (p.y - mean) * (p.y - mean);
    if (p.y != 0) {
      relative += (error_at / p.y) * (error_at / p.y);
      ++relative_count;
    }
  }
  fit.r_squared = spread > 0 ? 1 - residual / spread : (residual == 0 ? 1.0 : 0.0);
  fit.rms_relative_error = relative_count > 0 ? std::sqrt(relative / static_cast<double>(relative_count)) : 0.0;
  return fit;
}

}  // namespace dflop
