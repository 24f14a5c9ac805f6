// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/quadratic_fit.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <cmath>
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
