// SPDX-License-Identifier: Apache-2.0
#include <dflop/util/random.hpp>
#include <dflop/workload/statistics.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

using dflop::modality;
using dflop::sample;

namespace {

//! Brute-force nearest rank: the smallest data value v with at least p% of the values <= v.
std::int64_t brute_force_percentile(const std::vector<std::int64_t>& values, int percent) {
  std::int64_t best = 0;
  bool found = false;
  for (std::int64_t candidate : values) {
    const auto at_or_below = std::count_if(values.begin(), values.end(), [&](std::int64_t v) { return v <= candidate; });
    if (at_or_below * 100 >= static_cast<std::int64_t>(percent) * static_cast<std::int64_t>(values.size()) &&
        (!found || candidate < best)) {
      best = candidate;
      found = true;
    }
  }
  return best;
}

std::vector<std::int64_t> random_values(dflop::random_generator& random, std::size_t count) {
  const std::int64_t range = random.between(1, 1000);  // small ranges give many ties
  std::vector<std::int64_t> values(count);
  for (auto& value : values) value = random.between(-range / 4, range);
  return values;
}

}  // namespace

TEST_CASE("nearest-rank quantiles equal brute force on random data", "[workload]") {
  dflop::random_generator random(42);
  for (int trial = 0; trial < 120; ++trial) {
    const auto count = static_cast<std::size_t>(random.between(1, 150));
    auto values = random_values(random, count);
    auto sorted = values;
    std::sort(sorted.begin(), sorted.end());
    INFO("trial " << trial << ", " << count << " values");
    for (int percent = 0; percent <= 100; ++percent) {
      INFO("p" << percent);
      REQUIRE(dflop::nearest_rank_quantile(sorted, percent / 100.0) == brute_force_percentile(values, percent));
    }
    const auto summary = dflop::summarize_values(values);
    CHECK(summary.count == count);
    CHECK(summary.min == sorted.front());
    CHECK(summary.max == sorted.back());
    CHECK(summary.p50 == brute_force_percentile(values, 50));
    CHECK(summary.p90 == brute_force_percentile(values, 90));
    CHECK(summary.p99 == brute_force_percentile(values, 99));
    double total = 0;
    for (auto value : values) total += static_cast<double>(value);
    CHECK(summary.mean == Approx(total / static_cast<double>(count)));
  }
}

TEST_CASE("quantile edge cases", "[workload]") {
  const std::vector<std::int64_t> hundred = [] {
    std::vector<std::int64_t> v(100);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i + 1);
    return v;
  }();
  CHECK(dflop::nearest_rank_quantile(hundred, 0.99) == 99);  // 0.99 * 100 is 98.999... in binary
  CHECK(dflop::nearest_rank_quantile(hundred, 0.0) == 1);
  CHECK(dflop::nearest_rank_quantile(hundred, 1.0) == 100);
  CHECK_THROWS_AS(dflop::nearest_rank_quantile(std::vector<std::int64_t>{}, 0.5), dflop::error);
  CHECK_THROWS_AS(dflop::nearest_rank_quantile(hundred, 1.5), dflop::error);
  CHECK(dflop::summarize_values({}) == dflop::field_summary{});
}

TEST_CASE("workload statistics count modalities and summarize each field", "[workload]") {
  const std::vector<sample> samples{{"a", modality::text, 0, 0, 100},
                                    {"b", modality::image, 10, 7290, 7300},
                                    {"c", modality::image, 1, 729, 800},
                                    {"d", modality::video, 32, 23328, 6800}};
  const auto statistics = dflop::describe_workload(samples);
  CHECK(statistics.sample_count == 4);
  CHECK(statistics.count(modality::text) == 1);
  CHECK(statistics.count(modality::image) == 2);
  CHECK(statistics.count(modality::video) == 1);
  CHECK(statistics.count(modality::audio) == 0);
  CHECK(statistics.share(modality::image) == Approx(0.5));
  CHECK(statistics.llm_tokens == dflop::field_summary{4, 100, 3750.0, 800, 7300, 7300, 7300});
  CHECK(statistics.encoder_items.max == 32);
  CHECK(statistics.summary(dflop::sample_field::encoder_tokens).p50 == 729);
  CHECK(dflop::describe_workload({}).share(modality::text) == 0.0);
}

TEST_CASE("histograms count every value once, in the bin that holds it", "[workload]") {
  dflop::random_generator random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::int64_t> values(static_cast<std::size_t>(random.between(1, 300)));
    for (auto& value : values) value = random.between(0, std::int64_t{1} << random.between(0, 20));
    const auto log2_bins = dflop::log2_histogram(values);
    const auto linear_bins = dflop::linear_histogram(values, static_cast<std::size_t>(random.between(1, 12)));
    for (const auto* bins : {&log2_bins, &linear_bins}) {
      std::size_t total = 0;
      for (const auto& bin : *bins) {
        CHECK(bin.low < bin.high);
        const auto inside = std::count_if(values.begin(), values.end(),
                                          [&](std::int64_t v) { return v >= bin.low && v < bin.high; });
        CHECK(static_cast<std::size_t>(inside) == bin.count);
        total += bin.count;
      }
      CHECK(total == values.size());
    }
    CHECK(log2_bins.back().count > 0);
  }
  CHECK(dflop::log2_histogram(std::vector<std::int64_t>{0, 1, 2, 3, 4, 729}) ==
        std::vector<dflop::histogram_bin>{{0, 1, 1}, {1, 2, 1}, {2, 4, 2}, {4, 8, 1}, {8, 16, 0}, {16, 32, 0},
                                          {32, 64, 0}, {64, 128, 0}, {128, 256, 0}, {256, 512, 0}, {512, 1024, 1}});
  CHECK(dflop::linear_histogram(std::vector<std::int64_t>{10, 11, 19, 20}, 2) ==
        std::vector<dflop::histogram_bin>{{10, 16, 2}, {16, 22, 2}});
  CHECK_THROWS_AS(dflop::log2_histogram(std::vector<std::int64_t>{-1}), dflop::error);
  CHECK_THROWS_AS(dflop::linear_histogram(std::vector<std::int64_t>{1}, 0), dflop::error);
}
