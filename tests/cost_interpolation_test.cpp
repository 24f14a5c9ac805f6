// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/piecewise_linear.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <vector>

using dflop::curve_point;
using dflop::piecewise_linear;

TEST_CASE("interpolation is exact at grid points and linear between them", "[cost]") {
  const piecewise_linear curve({{4096, 10}, {1024, 2}, {2048, 4}});  // any order
  CHECK(curve(1024) == 2);
  CHECK(curve(2048) == 4);
  CHECK(curve(4096) == 10);
  CHECK(curve(1536) == 3);
  CHECK(curve(3072) == 7);
  // Linear extension of the end segments at both ends.
  CHECK(curve(512) == 1);
  CHECK(curve(0) == 0);
  CHECK(curve(8192) == 22);
  std::ostringstream text;
  text << curve;
  CHECK(text.str() == "piecewise_linear{(1024, 2), (2048, 4), (4096, 10)}");
  // One point: the line through the origin.
  CHECK(piecewise_linear({{100, 5}})(300) == 15);
}

TEST_CASE("interpolation of a random monotone table is exact and monotone (property)", "[cost]") {
  dflop::random_generator rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<curve_point> points;
    double x = rng.uniform(1, 100), y = rng.uniform(0, 10);
    const auto count = rng.between(2, 12);
    for (std::int64_t i = 0; i < count; ++i) {
      points.push_back({x, y});
      x += rng.uniform(0.5, 500);
      y += rng.uniform(0, 20) * (rng.below(4) == 0 ? 0 : 1);  // flat steps too
    }
    const piecewise_linear curve(points);
    for (const auto& p : points) REQUIRE(curve(p.x) == p.y);
    const double low = points.front().x - 200, high = points.back().x + 200;
    double previous = curve(low);
    for (int step = 1; step <= 500; ++step) {
      const double at = low + (high - low) * step / 500.0;
      const double value = curve(at);
      REQUIRE(value >= previous - 1e-9 * (1 + std::abs(previous)));
      previous = value;
    }
  }
}

TEST_CASE("bad interpolation points are rejected", "[cost]") {
  CHECK_THROWS_WITH(piecewise_linear({{1, 1}, {1, 2}}), Catch::Contains("two points at x = 1"));
  CHECK_THROWS_AS(piecewise_linear(std::vector<curve_point>{}), dflop::error);
  CHECK_THROWS_AS(piecewise_linear({{0, 1}}), dflop::error);
}
