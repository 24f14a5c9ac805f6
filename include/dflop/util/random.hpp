// SPDX-License-Identifier: Apache-2.0
//! \file
//! A small, fully specified random generator. `std::` distributions are
//! implementation-defined, so the same seed would give different mixtures on
//! different standard libraries; every dflop result that depends on a seed goes
//! through this type instead.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

namespace dflop {

//! xoshiro256** seeded by splitmix64: fast, 2^256 period, identical output on
//! every platform for a given seed. Satisfies `std::uniform_random_bit_generator`.
class random_generator {
public:
  using result_type = std::uint64_t;

  //! Seeds all 256 bits of state from one 64-bit seed.
  explicit random_generator(std::uint64_t seed = 0) noexcept {
    for (auto& word : state_) word = splitmix64(seed);
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  //! Next 64 random bits.
  result_type operator()() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  //! Uniform double in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }

  //! Uniform double in [low, high).
  double uniform(double low, double high) noexcept { return low + (high - low) * uniform(); }

  //! Uniform integer in [0, bound) without modulo bias (Lemire's method); bound > 0.
  std::uint64_t below(std::uint64_t bound) noexcept {
    unsigned __int128 product = static_cast<unsigned __int128>((*this)()) * bound;
    auto low = static_cast<std::uint64_t>(product);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        product = static_cast<unsigned __int128>((*this)()) * bound;
        low = static_cast<std::uint64_t>(product);
      }
    }
    return static_cast<std::uint64_t>(product >> 64);
  }

  //! Uniform integer in [low, high] (inclusive); requires low <= high.
  std::int64_t between(std::int64_t low, std::int64_t high) noexcept {
    return low + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(high - low) + 1));
  }

  //! Standard normal variate (Box-Muller; one of the pair is discarded for simplicity).
  double normal() noexcept {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  //! Normal variate with the given mean and standard deviation.
  double normal(double mean, double stddev) noexcept { return mean + stddev * normal(); }

  //! Log-normal variate: exp of a normal(mu, sigma).
  double lognormal(double mu, double sigma) noexcept { return std::exp(normal(mu, sigma)); }

private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static constexpr std::uint64_t splitmix64(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_[4]{};
};

}  // namespace dflop
