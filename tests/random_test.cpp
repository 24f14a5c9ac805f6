// SPDX-License-Identifier: Apache-2.0
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>

static_assert(std::uniform_random_bit_generator<dflop::random_generator>);

TEST_CASE("same seed, same stream; different seeds differ", "[util]") {
  dflop::random_generator a{42}, b{42}, c{43};
  int equal_to_c = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto x = a();
    REQUIRE(x == b());
    equal_to_c += (x == c());
  }
  CHECK(equal_to_c == 0);
}

TEST_CASE("uniform integers are unbiased and in range", "[util]") {
  dflop::random_generator rng{7};
  std::array<int, 6> counts{};
  constexpr int draws = 60000;
  for (int i = 0; i < draws; ++i) {
    const auto value = rng.between(-2, 3);
    REQUIRE(value >= -2);
    REQUIRE(value <= 3);
    ++counts[static_cast<std::size_t>(value + 2)];
  }
  // Each bucket expects 10000 with standard deviation ~91; 6 sigma is ample.
  for (int count : counts) CHECK(std::abs(count - draws / 6) < 550);
}

TEST_CASE("normal variates have the requested mean and spread", "[util]") {
  dflop::random_generator rng{3};
  double sum = 0, sum_sq = 0;
  constexpr int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const double x = rng.normal(5.0, 2.0);
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / draws;
  const double variance = sum_sq / draws - mean * mean;
  CHECK(mean == Approx(5.0).margin(0.03));
  CHECK(std::sqrt(variance) == Approx(2.0).margin(0.03));
}
