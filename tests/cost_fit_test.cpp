// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/quadratic_fit.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

using dflop::fit_point;

TEST_CASE("the fit is exact on noiseless data", "[cost]") {
  std::vector<fit_point> points;
  for (double x : {1024.0, 2048.0, 4096.0, 8192.0}) points.push_back({x, 0.7 + 2e-3 * x + 3e-7 * x * x});
  const auto fit = dflop::fit_quadratic(points);
  CHECK(fit.a == Approx(0.7).epsilon(1e-9));
  CHECK(fit.b == Approx(2e-3).epsilon(1e-9));
  CHECK(fit.c == Approx(3e-7).epsilon(1e-9));
  CHECK(fit.r_squared == Approx(1.0).epsilon(1e-12));
  CHECK(fit.rms_relative_error < 1e-12);
  CHECK(fit.points == 4);
  CHECK(fit(3000) == Approx(0.7 + 6 + 2.7).epsilon(1e-9));
}

TEST_CASE("the fit recovers known coefficients from noisy data within 2%", "[cost]") {
  const double a = 2.0, b = 3e-4, c = 5e-8;
  for (std::uint64_t seed : {1, 2, 3, 4, 5}) {
    dflop::random_generator rng(seed);
    std::vector<fit_point> points;
    for (int i = 0; i < 200; ++i) {
      const double x = rng.uniform(256, 8192);
      const double y = (a + b * x + c * x * x) * (1 + rng.normal(0, 0.005));  // 0.5% multiplicative noise
      points.push_back({x, y, 1 / (y * y)});
    }
    const auto fit = dflop::fit_quadratic(points);
    CAPTURE(seed, fit);
    CHECK(fit.a == Approx(a).epsilon(0.02));
    CHECK(fit.b == Approx(b).epsilon(0.02));
    CHECK(fit.c == Approx(c).epsilon(0.02));
    CHECK(fit.r_squared > 0.999);
    CHECK(fit.rms_relative_error == Approx(0.005).epsilon(0.2));
    CHECK(fit.points == 200);
  }
}

TEST_CASE("a degenerate design is rejected", "[cost]") {
  const std::vector<fit_point> two{{1, 1}, {2, 2}, {2, 2.1}, {1, 0.9}};
  CHECK_THROWS_WITH(dflop::fit_quadratic(two), Catch::Contains("at least 3 distinct sizes, got 2"));
  const std::vector<fit_point> bad_weight{{1, 1, 0}, {2, 2}, {3, 3}};
  CHECK_THROWS_AS(dflop::fit_quadratic(bad_weight), dflop::error);
  const std::vector<fit_point> nan{{1, 1}, {2, NAN}, {3, 3}};
  CHECK_THROWS_AS(dflop::fit_quadratic(nan), dflop::error);
}

namespace {

//! d/d(a, b, c) of sum w (a + b x + c x^2 - y)^2, each over the scale of its own
//! terms (sum w |r| x^k plus sum w |y| x^k), so that 0 reads alike at any size.
std::array<double, 3> relative_gradient(const dflop::quadratic_fit& fit, const std::vector<fit_point>& points) {
  std::array<double, 3> gradient{}, scale{};
  for (const auto& p : points) {
    const double r = fit(p.x) - p.y;
    const std::array<double, 3> power{1, p.x, p.x * p.x};
    for (std::size_t k = 0; k < 3; ++k) {
      gradient[k] += 2 * p.weight * r * power[k];
      scale[k] += 2 * p.weight * (std::abs(r) + std::abs(p.y)) * power[k];
    }
  }
  for (std::size_t k = 0; k < 3; ++k) gradient[k] /= scale[k];
  return gradient;
}

double weighted_residual(const dflop::quadratic_fit& fit, const std::vector<fit_point>& points) {
  double sum = 0;
  for (const auto& p : points) sum += p.weight * (fit(p.x) - p.y) * (fit(p.x) - p.y);
  return sum;
}

}  // namespace

TEST_CASE("the nondecreasing fit is the least squares with b, c >= 0 (KKT and feasible perturbations)", "[cost]") {
  std::size_t constrained = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    dflop::random_generator rng(seed);
    // Curves that bend either way, with few points (as small profiles have): some
    // free fits come out with negative b or c, others not.
    const double a = rng.uniform(-1, 2), b = rng.uniform(-1e-3, 3e-3), c = rng.uniform(-3e-7, 3e-7);
    std::vector<fit_point> points;
    const int count = 3 + static_cast<int>(rng.uniform(0, 5));
    for (int i = 0; i < count; ++i) {
      const double x = rng.uniform(64, 4096);
      const double y = a + b * x + c * x * x + rng.normal(0, 0.05);
      points.push_back({x, y, rng.uniform(0.5, 2)});
    }
    const auto fit = dflop::fit_nondecreasing_quadratic(points);
    const auto free = dflop::fit_quadratic(points);
    CAPTURE(seed, fit, free);
    REQUIRE(fit.b >= 0);
    REQUIRE(fit.c >= 0);
    if (free.b >= 0 && free.c >= 0) {
      CHECK(fit.a == Approx(free.a).margin(1e-9));
      CHECK(fit.b == Approx(free.b).margin(1e-12));
      CHECK(fit.c == Approx(free.c).margin(1e-15));
      continue;
    }
    ++constrained;
    // KKT of the convex problem: a free (its derivative 0); b and c either inside
    // (derivative 0) or on the bound with a derivative that pushes into it (>= 0).
    const auto gradient = relative_gradient(fit, points);
    CHECK(std::abs(gradient[0]) < 1e-9);
    for (std::size_t k = 1; k < 3; ++k) {
      const double coefficient = k == 1 ? fit.b : fit.c;
      if (coefficient > 0) CHECK(std::abs(gradient[k]) < 1e-9);
      else CHECK(gradient[k] > -1e-9);
    }
    // No feasible neighbour fits better.
    const double best = weighted_residual(fit, points);
    for (int trial = 0; trial < 50; ++trial) {
      dflop::quadratic_fit other = fit;
      other.a += rng.normal(0, 1e-2);
      other.b = std::max(0.0, other.b + rng.normal(0, 1e-5));
      other.c = std::max(0.0, other.c + rng.normal(0, 1e-9));
      CHECK(weighted_residual(other, points) >= best * (1 - 1e-12));
    }
    CHECK(fit.points == points.size());
  }
  CHECK(constrained > 50);  // the instances did exercise the bounds
}

TEST_CASE("a small profile that bends down is not carried to sizes past it as zero time", "[cost]") {
  // A measured encoder backward (ms) at 64, 128 and 256 tokens: three points fit
  // a quadratic exactly, and theirs bends down (c < 0), crossing 0 before 2688
  // tokens, the size of a batch the plan then ran.
  std::vector<fit_point> points;
  for (auto [x, y] : {std::pair{64.0, 3.496376}, std::pair{128.0, 7.1651705}, std::pair{256.0, 13.516981}})
    points.push_back({x, y, 1 / (y * y)});
  const auto free = dflop::fit_quadratic(points);
  REQUIRE(free.c < 0);
  REQUIRE(free(2688) < 0);
  const auto fit = dflop::fit_nondecreasing_quadratic(points);
  CAPTURE(fit);
  CHECK(fit.c == 0);  // the best line
  CHECK(fit.b > 0);
  CHECK(fit(2688) > 5 * fit(256));
  CHECK(fit.rms_relative_error < 0.05);
}
