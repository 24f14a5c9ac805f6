// SPDX-License-Identifier: Apache-2.0
//! \file
//! Drawing global batches from an in-memory workload, as a data loader would:
//! the planner and the scheduler are judged on such batches, not on the mean
//! sample. Every draw goes through `dflop::random_generator`, so a seed gives
//! the same batches on every platform. (For a trace too large for memory see
//! streaming_sampling.hpp.)
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dflop {

//! How successive batches draw from the workload.
enum class batch_mode : std::uint8_t {
  with_replacement,     //!< every slot is an independent uniform draw; a sample may repeat, even within a batch
  without_replacement,  //!< no sample repeats within a batch; batches are independent of each other
  epochs,               //!< no sample repeats until an epoch ends: the workload is shuffled, cut into
                        //!< floor(N / B) batches (the remainder is skipped), then shuffled anew
};

//! The mode's name ("with_replacement", "without_replacement", "epochs").
[[nodiscard]] constexpr std::string_view to_string(batch_mode mode) noexcept {
  switch (mode) {
    case batch_mode::with_replacement: return "with_replacement";
    case batch_mode::without_replacement: return "without_replacement";
    case batch_mode::epochs: return "epochs";
  }
  return "unknown";
}

namespace detail {

//! Rejects a batch size that `mode` cannot serve from `population` samples.
inline void check_batch_request(std::size_t population, std::size_t batch_size, batch_mode mode) {
  if (batch_size == 0) throw input_error("batch size", 0, "must be at least 1");
  if (population == 0) throw input_error("batch size", 0, "cannot draw a batch from an empty workload");
  if (mode != batch_mode::with_replacement && batch_size > population) {
    std::string reason = "batch size ";
    reason.append(std::to_string(batch_size))
        .append(" is larger than the workload (")
        .append(std::to_string(population))
        .append(" samples); sampling ")
        .append(to_string(mode))
        .append(" needs batch size <= sample count (use with_replacement or a smaller batch)");
    throw input_error("batch size", 0, reason);
  }
}

}  // namespace detail

//! Produces a sequence of batches of indices into a workload of `population`
//! samples. Memory O(population) for the modes without replacement.
class batch_sampler {
public:
  //! Throws `input_error` for batch size 0, an empty workload, or (without
  //! replacement, epochs) a batch larger than the workload.
  batch_sampler(std::size_t population, std::size_t batch_size, batch_mode mode, std::uint64_t seed)
      : population_(population), batch_size_(batch_size), mode_(mode), random_(seed) {
    detail::check_batch_request(population, batch_size, mode);
    if (mode != batch_mode::with_replacement) {
      order_.resize(population);
      std::iota(order_.begin(), order_.end(), std::size_t{0});
      position_ = population;  // forces a shuffle before the first epoch batch
    }
  }

  //! Indices of the next batch (exactly `batch_size` of them).
  [[nodiscard]] std::vector<std::size_t> next() {
    std::vector<std::size_t> batch;
    batch.reserve(batch_size_);
    switch (mode_) {
      case batch_mode::with_replacement:
        for (std::size_t slot = 0; slot < batch_size_; ++slot) batch.push_back(random_.below(population_));
        break;
      case batch_mode::without_replacement:
        // Partial Fisher-Yates: from any permutation, B swaps give a uniform B-subset in uniform order.
        for (std::size_t slot = 0; slot < batch_size_; ++slot) {
          std::swap(order_[slot], order_[slot + random_.below(population_ - slot)]);
          batch.push_back(order_[slot]);
        }
        break;
      case batch_mode::epochs:
        if (position_ + batch_size_ > population_) {
          shuffle_all();
          position_ = 0;
          ++epoch_;
        }
        batch.assign(order_.begin() + static_cast<std::ptrdiff_t>(position_),
                     order_.begin() + static_cast<std::ptrdiff_t>(position_ + batch_size_));
        position_ += batch_size_;
        break;
    }
    return batch;
  }

  //! In `epochs` mode, the 1-based epoch of the batch `next()` returned last (0 before any).
  [[nodiscard]] std::size_t epoch() const noexcept { return epoch_; }
  //! Samples per batch.
  [[nodiscard]] std::size_t batch_size() const noexcept { return batch_size_; }
  //! The mode this sampler draws with.
  [[nodiscard]] batch_mode mode() const noexcept { return mode_; }

private:
  void shuffle_all() {
    for (std::size_t i = population_; i > 1; --i) std::swap(order_[i - 1], order_[random_.below(i)]);
  }

  std::size_t population_;
  std::size_t batch_size_;
  batch_mode mode_;
  random_generator random_;
  std::vector<std::size_t> order_;
  std::size_t position_ = 0;
  std::size_t epoch_ = 0;
};

//! The samples at `indices`, in that order.
[[nodiscard]] inline std::vector<sample> gather_samples(std::span<const sample> samples,
                                                        std::span<const std::size_t> indices) {
  std::vector<sample> batch;
  batch.reserve(indices.size());
  for (std::size_t index : indices) batch.push_back(samples[index]);
  return batch;
}

//! One global batch of `batch_size` samples drawn with `seed` (`epochs` acts as
//! `without_replacement` for a single batch).
[[nodiscard]] inline std::vector<sample> sample_batch(std::span<const sample> samples, std::size_t batch_size,
                                                      batch_mode mode, std::uint64_t seed) {
  batch_sampler sampler(samples.size(), batch_size, mode, seed);
  return gather_samples(samples, sampler.next());
}

//! `batch_count` successive global batches of `batch_size` samples drawn with `seed`.
[[nodiscard]] inline std::vector<std::vector<sample>> sample_batches(std::span<const sample> samples,
                                                                     std::size_t batch_size, std::size_t batch_count,
                                                                     batch_mode mode, std::uint64_t seed) {
  batch_sampler sampler(samples.size(), batch_size, mode, seed);
  std::vector<std::vector<sample>> batches;
  batches.reserve(batch_count);
  for (std::size_t k = 0; k < batch_count; ++k) batches.push_back(gather_samples(samples, sampler.next()));
  return batches;
}

}  // namespace dflop
