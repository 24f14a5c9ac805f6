// SPDX-License-Identifier: Apache-2.0
//! \file
//! Weighted least squares of `y = a + b x + c x^2` (free, or with `b, c >= 0`),
//! with fit diagnostics: the model behind fitted cost curves, reusable by a profiler.
#pragma once

#include <dflop/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
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

namespace detail {

//! Checks `points` for `fit_quadratic` and returns the largest |x| (the column scale).
//! \throws dflop::error with fewer than 3 distinct x, a non-finite value or a weight <= 0.
[[nodiscard]] inline double checked_fit_scale(std::span<const fit_point> points) {
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
  return scale;
}

//! The weighted least-squares coefficients (a, b, c) over the columns of
//! [1, u, u^2] (u = x / scale) that `use` keeps, the others held at 0; unscaled
//! back to x. Householder QR on the kept columns, in double, so large sizes (8k
//! tokens, squared) stay well conditioned. Empty when the kept columns are singular.
[[nodiscard]] inline std::optional<std::array<double, 3>> least_squares_columns(std::span<const fit_point> points,
                                                                                double scale,
                                                                                std::array<bool, 3> use) {
  std::array<std::size_t, 3> column{};  // kept column j is power column[j]
  std::size_t kept = 0;
  for (std::size_t power = 0; power < 3; ++power)
    if (use[power]) column[kept++] = power;
  // Rows sqrt(w) [kept powers of u | y]; the right-hand side sits in slot `kept`.
  const std::size_t n = points.size();
  std::vector<std::array<double, 4>> rows(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double root = std::sqrt(points[i].weight);
    const double u = points[i].x / scale;
    const std::array<double, 3> powers{1.0, u, u * u};
    for (std::size_t j = 0; j < kept; ++j) rows[i][j] = root * powers[column[j]];
    rows[i][kept] = root * points[i].y;
  }
  for (std::size_t k = 0; k < kept; ++k) {
    double norm = 0;
    for (std::size_t i = k; i < n; ++i) norm += rows[i][k] * rows[i][k];
    norm = std::sqrt(norm);
    if (norm == 0) return std::nullopt;
    const double alpha = rows[k][k] > 0 ? -norm : norm;
    // v = column k below the diagonal minus alpha e_k; H = I - 2 v v^T / (v^T v).
    std::vector<double> v(n - k);
    for (std::size_t i = k; i < n; ++i) v[i - k] = rows[i][k];
    v[0] -= alpha;
    double vv = 0;
    for (double e : v) vv += e * e;
    if (vv == 0) continue;
    for (std::size_t j = k; j <= kept; ++j) {
      double dot = 0;
      for (std::size_t i = k; i < n; ++i) dot += v[i - k] * rows[i][j];
      const double factor = 2 * dot / vv;
      for (std::size_t i = k; i < n; ++i) rows[i][j] -= factor * v[i - k];
    }
  }
  // Back substitution on the upper triangle; a near-zero pivot means a degenerate design.
  double largest = 0;
  for (std::size_t k = 0; k < kept; ++k) largest = std::max(largest, std::abs(rows[k][k]));
  std::array<double, 3> beta{};
  for (std::size_t k = kept; k-- > 0;) {
    if (std::abs(rows[k][k]) <= 1e-13 * largest) return std::nullopt;
    double sum = rows[k][kept];
    for (std::size_t j = k + 1; j < kept; ++j) sum -= rows[k][j] * beta[j];
    beta[k] = sum / rows[k][k];
  }
  std::array<double, 3> coefficients{};
  const std::array<double, 3> unscale{1.0, 1.0 / scale, 1.0 / (scale * scale)};
  for (std::size_t j = 0; j < kept; ++j) coefficients[column[j]] = beta[j] * unscale[column[j]];
  return coefficients;
}

//! The weighted sum of squared residuals of `fit` over `points`.
[[nodiscard]] inline double weighted_residual(const quadratic_fit& fit, std::span<const fit_point> points) {
  double sum = 0;
  for (const auto& p : points) sum += p.weight * (fit(p.x) - p.y) * (fit(p.x) - p.y);
  return sum;
}

//! `fit` with its diagnostics (points, R^2, RMS relative error) over `points`.
[[nodiscard]] inline quadratic_fit with_diagnostics(quadratic_fit fit, std::span<const fit_point> points) {
  const std::size_t n = points.size();
  fit.points = n;
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

}  // namespace detail

//! Fits `a + b x + c x^2` to `points` minimizing sum of weight * residual^2.
//! Solved by Householder QR on the column-scaled design matrix [1, x/s, (x/s)^2]
//! (s = max |x|), in double, so large sizes (8k tokens, squared) stay well conditioned.
//! \throws dflop::error with fewer than 3 distinct x, a non-finite value or a weight <= 0.
[[nodiscard]] inline quadratic_fit fit_quadratic(std::span<const fit_point> points) {
  const double scale = detail::checked_fit_scale(points);
  const auto beta = detail::least_squares_columns(points, scale, {true, true, true});
  if (!beta) throw error("fit_quadratic: singular design (sizes too close)");
  return detail::with_diagnostics({(*beta)[0], (*beta)[1], (*beta)[2]}, points);
}

//! The same fit with `b >= 0` and `c >= 0`: a curve that never bends down as x
//! grows, as compute time does not. Three or four noisy points can fit a
//! quadratic with a small negative `c` that, carried to sizes past the profile's,
//! turns the time negative (a profile of 64..256 tokens priced a 2688-token
//! backward at 0). The constrained least squares is the best-fitting of the four
//! subsets {a, b, c}, {a, b}, {a, c}, {a} whose fit has no negative `b` or `c`:
//! the optimum's zero coefficients make it the free fit over the rest, so it is
//! one of them. Equals `fit_quadratic` whenever that fit has `b, c >= 0`.
//! \throws dflop::error as `fit_quadratic`.
[[nodiscard]] inline quadratic_fit fit_nondecreasing_quadratic(std::span<const fit_point> points) {
  const double scale = detail::checked_fit_scale(points);
  std::optional<quadratic_fit> best;
  double best_residual = 0;
  for (const std::array<bool, 3> use : {std::array{true, true, true}, std::array{true, true, false},
                                        std::array{true, false, true}, std::array{true, false, false}}) {
    const auto beta = detail::least_squares_columns(points, scale, use);
    if (!beta || (*beta)[1] < 0 || (*beta)[2] < 0) continue;
    const quadratic_fit candidate{(*beta)[0], (*beta)[1], (*beta)[2]};
    const double residual = detail::weighted_residual(candidate, points);
    if (!best || residual < best_residual) {
      best = candidate;
      best_residual = residual;
    }
  }
  // {a} alone is never singular (weights > 0) and has no b or c to be negative.
  return detail::with_diagnostics(*best, points);
}

}  // namespace dflop
