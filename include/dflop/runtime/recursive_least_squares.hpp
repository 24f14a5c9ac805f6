// SPDX-License-Identifier: Apache-2.0
//! \file
//! Weighted recursive least squares with exponential forgetting: the estimator
//! behind the online cost model. Each update costs O(N^2); old observations
//! lose weight by a factor `forgetting` per update, so the estimate follows
//! costs that change (a warmer GPU, another kernel, a different data mix).
#pragma once

#include <dflop/error.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <string>

namespace dflop {

//! Estimates theta in `y = theta . phi` from a stream of (phi, y, weight).
//! Minimizes sum_k forgetting^(n-k) weight_k (y_k - theta . phi_k)^2 plus the
//! prior's term. Each eigenvalue of the covariance is capped at the prior
//! variance, so directions no observation excites cannot wind up while forgetting.
template <std::size_t N>
class recursive_least_squares {
public:
  using vector = std::array<double, N>;                //!< coefficients or features
  using matrix = std::array<std::array<double, N>, N>;  //!< covariance

  //! \param initial the prior estimate  \param uncertainty prior standard deviation of each coefficient, > 0
  //! \param forgetting weight kept by past observations per update, in (0, 1]; 1 = ordinary RLS
  //! \throws dflop::error naming the argument when out of range.
  recursive_least_squares(vector initial, double uncertainty, double forgetting)
      : theta_(initial), forgetting_(forgetting) {
    if (!(uncertainty > 0) || !std::isfinite(uncertainty))
      throw error("recursive_least_squares: uncertainty must be finite and > 0, got " + std::to_string(uncertainty));
    if (!(forgetting > 0 && forgetting <= 1))
      throw error("recursive_least_squares: forgetting must be in (0, 1], got " + std::to_string(forgetting));
    for (std::size_t i = 0; i < N; ++i) covariance_[i][i] = uncertainty * uncertainty;
    max_variance_ = uncertainty * uncertainty;
  }

  //! theta . phi.
  [[nodiscard]] double predict(const vector& phi) const noexcept {
    double sum = 0;
    for (std::size_t i = 0; i < N; ++i) sum += theta_[i] * phi[i];
    return sum;
  }

  //! Adds the observation `y` at `phi` with `weight` (> 0; e.g. 1 / y^2 for relative
  //! error). Returns the a-priori residual `y - predict(phi)` (before the update).
  double update(const vector& phi, double y, double weight = 1) noexcept {
    const double residual = y - predict(phi);
    vector p_phi{};  // P phi
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t j = 0; j < N; ++j) p_phi[i] += covariance_[i][j] * phi[j];
    double denominator = forgetting_ / weight;
    for (std::size_t i = 0; i < N; ++i) denominator += phi[i] * p_phi[i];
    if (!(denominator > 0) || !std::isfinite(denominator)) return residual;
    // gain k = P phi / (lambda / w + phi' P phi); theta += k residual; P = (P - k phi' P) / lambda.
    double trace = 0;
    for (std::size_t i = 0; i < N; ++i) {
      theta_[i] += p_phi[i] / denominator * residual;
      for (std::size_t j = 0; j < N; ++j)
        covariance_[i][j] = (covariance_[i][j] - p_phi[i] * p_phi[j] / denominator) / forgetting_;
      trace += covariance_[i][i];
    }
    // No eigenvalue can exceed the cap while the trace does not; without forgetting none grows.
    if (forgetting_ < 1 && trace > max_variance_) clamp_covariance();
    ++updates_;
    return residual;
  }

  //! The current estimate.
  [[nodiscard]] const vector& coefficients() const noexcept { return theta_; }
  //! The current covariance (scaled: uncertainty of the estimate up to the noise level).
  [[nodiscard]] const matrix& covariance() const noexcept { return covariance_; }
  //! The forgetting factor.
  [[nodiscard]] double forgetting() const noexcept { return forgetting_; }
  //! Observations taken so far.
  [[nodiscard]] std::size_t updates() const noexcept { return updates_; }

private:
  // Caps every eigenvalue of the covariance at the prior variance: directions the
  // observations do not excite would otherwise grow by 1 / forgetting per update
  // (wind-up); excited directions keep their forgetting. Cyclic Jacobi, N is small.
  void clamp_covariance() noexcept {
    matrix a = covariance_;
    matrix v{};
    for (std::size_t i = 0; i < N; ++i) v[i][i] = 1;
    for (int sweep = 0; sweep < 50; ++sweep) {
      double off = 0;
      for (std::size_t p = 0; p < N; ++p)
        for (std::size_t q = p + 1; q < N; ++q) off += a[p][q] * a[p][q];
      if (off < 1e-30) break;
      for (std::size_t p = 0; p < N; ++p)
        for (std::size_t q = p + 1; q < N; ++q) {
          if (a[p][q] == 0) continue;
          const double theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
          const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
          const double c = 1 / std::sqrt(t * t + 1), s = t * c;
          for (std::size_t k = 0; k < N; ++k) {  // a = a J (columns p, q)
            const double akp = a[k][p], akq = a[k][q];
            a[k][p] = c * akp - s * akq;
            a[k][q] = s * akp + c * akq;
          }
          for (std::size_t k = 0; k < N; ++k) {  // a = J' a (rows p, q)
            const double apk = a[p][k], aqk = a[q][k];
            a[p][k] = c * apk - s * aqk;
            a[q][k] = s * apk + c * aqk;
          }
          for (std::size_t k = 0; k < N; ++k) {  // v = v J
            const double vkp = v[k][p], vkq = v[k][q];
            v[k][p] = c * vkp - s * vkq;
            v[k][q] = s * vkp + c * vkq;
          }
        }
    }
    bool clamped = false;
    std::array<double, N> eigen{};
    for (std::size_t i = 0; i < N; ++i) {
      eigen[i] = a[i][i];
      if (eigen[i] > max_variance_ * (1 + 1e-9)) {
        eigen[i] = max_variance_;
        clamped = true;
      }
    }
    if (!clamped) return;
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        double sum = 0;
        for (std::size_t k = 0; k < N; ++k) sum += v[i][k] * eigen[k] * v[j][k];
        covariance_[i][j] = sum;
      }
  }

  vector theta_;
  matrix covariance_{};
  double forgetting_;
  double max_variance_ = 0;
  std::size_t updates_ = 0;
};

}  // namespace dflop
