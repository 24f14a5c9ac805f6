// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a workload looks like at a glance: how many samples of each modality,
//! and the spread (min, mean, p50/p90/p99, max) and histogram of each size
//! field. Tail quantiles matter more than means: tail samples decide memory
//! and stragglers.
//!
//! Quantiles use the nearest-rank definition: the q-quantile of n sorted
//! values is the value at 1-based rank ceil(q * n) (rank 1 for q = 0), i.e.
//! the smallest value with at least q * n values at or below it. It is always
//! one of the data values, never an interpolation.
#pragma once

#include <dflop/error.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! The three size fields of a sample, for code that treats them alike.
enum class sample_field : std::uint8_t {
  encoder_items,   //!< tiles, images, frames or chunks
  encoder_tokens,  //!< encoder tokens over all items
  llm_tokens,      //!< packed LLM sequence length
};

//! Every size field, in declaration order.
inline constexpr std::array<sample_field, 3> all_sample_fields{sample_field::encoder_items,
                                                              sample_field::encoder_tokens, sample_field::llm_tokens};

//! The field's name as written in traces.
[[nodiscard]] constexpr std::string_view to_string(sample_field field) noexcept {
  switch (field) {
    case sample_field::encoder_items: return "encoder_items";
    case sample_field::encoder_tokens: return "encoder_tokens";
    case sample_field::llm_tokens: return "llm_tokens";
  }
  return "unknown";
}

//! The value of `field` in `s`.
[[nodiscard]] constexpr std::int64_t field_value(const sample& s, sample_field field) noexcept {
  switch (field) {
    case sample_field::encoder_items: return s.encoder_items;
    case sample_field::encoder_tokens: return s.encoder_tokens;
    case sample_field::llm_tokens: return s.llm_tokens;
  }
  return 0;
}

//! Nearest-rank q-quantile of `sorted` (ascending, non-empty), 0 <= q <= 1.
//! q * n within 1e-9 (relative) of an integer counts as that integer, so that
//! floating-point noise (0.99 * 100 = 98.99999...) cannot shift the rank.
//! Throws `dflop::error` on an empty range or q outside [0, 1].
[[nodiscard]] inline std::int64_t nearest_rank_quantile(std::span<const std::int64_t> sorted, double q) {
  if (sorted.empty()) throw error("nearest_rank_quantile: no values");
  if (!(q >= 0.0 && q <= 1.0)) throw error("nearest_rank_quantile: q must be in [0, 1], got " + std::to_string(q));
  const auto n = static_cast<double>(sorted.size());
  double position = q * n;
  const double nearest = std::round(position);
  if (std::abs(position - nearest) <= 1e-9 * std::max(1.0, position)) position = nearest;
  auto rank = static_cast<std::size_t>(std::ceil(position));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

//! Spread of one field over a workload. All zeros when `count` is 0.
struct field_summary {
  std::size_t count = 0;    //!< number of values
  std::int64_t min = 0;     //!< smallest value
  double mean = 0;          //!< arithmetic mean
  std::int64_t p50 = 0;     //!< nearest-rank median
  std::int64_t p90 = 0;     //!< nearest-rank 90th percentile
  std::int64_t p99 = 0;     //!< nearest-rank 99th percentile
  std::int64_t max = 0;     //!< largest value

  friend bool operator==(const field_summary&, const field_summary&) = default;
};

//! Summarizes `values` (any order; taken by value because it is sorted).
[[nodiscard]] inline field_summary summarize_values(std::vector<std::int64_t> values) {
  field_summary summary;
  summary.count = values.size();
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  // Sum in long double: token totals of millions of samples stay exact enough.
  long double total = 0;
  for (std::int64_t value : values) total += static_cast<long double>(value);
  summary.min = values.front();
  summary.max = values.back();
  summary.mean = static_cast<double>(total / static_cast<long double>(values.size()));
  summary.p50 = nearest_rank_quantile(values, 0.50);
  summary.p90 = nearest_rank_quantile(values, 0.90);
  summary.p99 = nearest_rank_quantile(values, 0.99);
  return summary;
}

//! The values of `field` over `samples`, in order.
[[nodiscard]] inline std::vector<std::int64_t> field_values(std::span<const sample> samples, sample_field field) {
  std::vector<std::int64_t> values;
  values.reserve(samples.size());
  for (const sample& s : samples) values.push_back(field_value(s, field));
  return values;
}

//! Counts per modality and the spread of each size field of a workload.
struct workload_statistics {
  std::size_t sample_count = 0;                                  //!< samples in the workload
  std::array<std::size_t, all_modalities.size()> modality_counts{};  //!< indexed by the modality's value
  field_summary encoder_items;                                   //!< spread of encoder_items
  field_summary encoder_tokens;                                  //!< spread of encoder_tokens
  field_summary llm_tokens;                                      //!< spread of llm_tokens

  //! Number of samples of `kind`.
  [[nodiscard]] std::size_t count(modality kind) const noexcept {
    return modality_counts[static_cast<std::size_t>(kind)];
  }
  //! Fraction of samples of `kind` (0 for an empty workload).
  [[nodiscard]] double share(modality kind) const noexcept {
    return sample_count == 0 ? 0.0 : static_cast<double>(count(kind)) / static_cast<double>(sample_count);
  }
  //! The summary of `field`.
  [[nodiscard]] const field_summary& summary(sample_field field) const noexcept {
    switch (field) {
      case sample_field::encoder_items: return encoder_items;
      case sample_field::encoder_tokens: return encoder_tokens;
      case sample_field::llm_tokens: break;
    }
    return llm_tokens;
  }

  friend bool operator==(const workload_statistics&, const workload_statistics&) = default;
};

//! Computes the statistics of `samples` (an empty workload gives all zeros).
[[nodiscard]] inline workload_statistics describe_workload(std::span<const sample> samples) {
  workload_statistics statistics;
  statistics.sample_count = samples.size();
  for (const sample& s : samples) ++statistics.modality_counts[static_cast<std::size_t>(s.kind)];
  statistics.encoder_items = summarize_values(field_values(samples, sample_field::encoder_items));
  statistics.encoder_tokens = summarize_values(field_values(samples, sample_field::encoder_tokens));
  statistics.llm_tokens = summarize_values(field_values(samples, sample_field::llm_tokens));
  return statistics;
}

//! One histogram bin: values in [low, high) and how many there were.
struct histogram_bin {
  std::int64_t low = 0;    //!< inclusive lower edge
  std::int64_t high = 0;   //!< exclusive upper edge
  std::size_t count = 0;   //!< values in the bin

  friend bool operator==(const histogram_bin&, const histogram_bin&) = default;
};

//! Power-of-two histogram of non-negative values: bin 0 holds [0, 1), bin k >= 1
//! holds [2^(k-1), 2^k). Bins run from 0 up to the highest non-empty one, so
//! every value is counted exactly once. Suits sizes spanning orders of
//! magnitude. Throws `dflop::error` for a negative value.
[[nodiscard]] inline std::vector<histogram_bin> log2_histogram(std::span<const std::int64_t> values) {
  std::vector<histogram_bin> bins;
  for (std::int64_t value : values) {
    if (value < 0) throw error("log2_histogram: negative value " + std::to_string(value));
    const auto index = static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(value)));
    while (bins.size() <= index) {
      const std::size_t k = bins.size();
      const std::int64_t low = k == 0 ? 0 : std::int64_t{1} << (k - 1);
      const std::int64_t high = k == 63 ? std::numeric_limits<std::int64_t>::max() : std::int64_t{1} << k;
      bins.push_back({low, high, 0});
    }
    ++bins[index].count;
  }
  return bins;
}

//! Histogram with `bin_count` equal-width bins covering [min, max] of `values`
//! (the last bin also holds max). Width is rounded up to a whole number, so the
//! last bin may reach past max. Empty input gives no bins; throws `dflop::error`
//! when `bin_count` is 0.
[[nodiscard]] inline std::vector<histogram_bin> linear_histogram(std::span<const std::int64_t> values,
                                                                 std::size_t bin_count) {
  if (bin_count == 0) throw error("linear_histogram: bin_count must be at least 1");
  if (values.empty()) return {};
  const auto [lowest, highest] = std::minmax_element(values.begin(), values.end());
  const std::int64_t low = *lowest;
  const auto span_width = static_cast<std::uint64_t>(*highest - low) + 1;
  const std::uint64_t width = std::max<std::uint64_t>(1, (span_width + bin_count - 1) / bin_count);
  std::vector<histogram_bin> bins(bin_count);
  for (std::size_t k = 0; k < bin_count; ++k) {
    bins[k].low = low + static_cast<std::int64_t>(width * k);
    bins[k].high = bins[k].low + static_cast<std::int64_t>(width);
  }
  for (std::int64_t value : values) {
    const auto index = std::min<std::uint64_t>(static_cast<std::uint64_t>(value - low) / width, bin_count - 1);
    ++bins[index].count;
  }
  return bins;
}

}  // namespace dflop
