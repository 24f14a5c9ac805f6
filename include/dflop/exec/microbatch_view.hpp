// SPDX-License-Identifier: Apache-2.0
//! \file
//! What one training step runs on: the global batch and, per replica and
//! microbatch, the indices of its samples. Every rank holds all of it, so every
//! rank derives every activation's shape itself and no shapes travel at run time.
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/saturating.hpp>
#include <dflop/workload/sample.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! The samples of one microbatch: a view of index list `indices` into `batch`.
class microbatch_view {
public:
  //! Iterates the microbatch's samples (as `const sample&`).
  class iterator {
  public:
    using iterator_category = std::forward_iterator_tag;  //!< forward only
    using value_type = sample;                            //!< what it yields
    using difference_type = std::ptrdiff_t;               //!< distance type
    using pointer = const sample*;                        //!< pointer type
    using reference = const sample&;                      //!< reference type
    iterator() = default;
    //! Iterator at position `at` of `indices`.
    iterator(std::span<const sample> batch, const std::uint32_t* at) : batch_(batch), at_(at) {}
    //! The sample.
    reference operator*() const { return batch_[*at_]; }
    //! Pointer to the sample.
    pointer operator->() const { return &batch_[*at_]; }
    //! Next sample.
    iterator& operator++() {
      ++at_;
      return *this;
    }
    //! Next sample (post-increment).
    iterator operator++(int) {
      iterator old = *this;
      ++at_;
      return old;
    }
    //! Same position.
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.at_ == b.at_; }

  private:
    std::span<const sample> batch_;
    const std::uint32_t* at_ = nullptr;
  };

  microbatch_view() = default;
  //! The samples `batch[indices[i]]`.
  microbatch_view(std::span<const sample> batch, std::span<const std::uint32_t> indices) noexcept
      : batch_(batch), indices_(indices) {}

  //! Number of samples.
  [[nodiscard]] std::size_t size() const noexcept { return indices_.size(); }
  //! Whether the microbatch holds no sample.
  [[nodiscard]] bool empty() const noexcept { return indices_.empty(); }
  //! The i-th sample.
  [[nodiscard]] const sample& operator[](std::size_t i) const { return batch_[indices_[i]]; }
  //! First sample.
  [[nodiscard]] iterator begin() const noexcept { return {batch_, indices_.data()}; }
  //! Past the last sample.
  [[nodiscard]] iterator end() const noexcept { return {batch_, indices_.data() + indices_.size()}; }
  //! Positions of the samples in the global batch.
  [[nodiscard]] std::span<const std::uint32_t> indices() const noexcept { return indices_; }
  //! The global batch the indices point into.
  [[nodiscard]] std::span<const sample> batch() const noexcept { return batch_; }
  //! Sum of the samples' packed LLM sequence lengths (the LLM's row length);
  //! `saturated_count` when it exceeds 64 bits.
  [[nodiscard]] std::int64_t llm_tokens() const noexcept {
    std::int64_t total = 0;
    for (auto i : indices_) total = saturating_add(total, batch_[i].llm_tokens);
    return total;
  }
  //! Sum of the samples' encoder tokens; `saturated_count` when it exceeds 64 bits.
  [[nodiscard]] std::int64_t encoder_tokens() const noexcept {
    std::int64_t total = 0;
    for (auto i : indices_) total = saturating_add(total, batch_[i].encoder_tokens);
    return total;
  }

private:
  std::span<const sample> batch_;
  std::span<const std::uint32_t> indices_;
};

//! One step's input: the global batch and `microbatches[replica * m + j]`, the
//! sample indices of replica `replica`'s microbatch j (for every replica: each rank
//! sees the whole plan, as the planner's `batch_schedule` gives it).
struct step_batch {
  std::span<const sample> samples;                           //!< the global batch
  std::span<const std::vector<std::uint32_t>> microbatches;  //!< replica-major index lists

  //! The samples of `replica`'s microbatch `microbatch` for `m` microbatches per replica.
  [[nodiscard]] microbatch_view view(std::uint32_t replica, std::uint32_t microbatch, std::uint32_t m) const {
    return {samples, microbatches[static_cast<std::size_t>(replica) * m + microbatch]};
  }

  //! Throws `dflop::error` unless there are `replicas * m` lists with indices in range.
  void check(std::uint32_t replicas, std::uint32_t m) const {
    if (microbatches.size() != static_cast<std::size_t>(replicas) * m) {
      std::string text("step_batch: ");
      text.append(std::to_string(microbatches.size())).append(" microbatches for ").append(std::to_string(replicas));
      text.append(" replicas x ").append(std::to_string(m)).append(" microbatches");
      throw error(text);
    }
    for (const auto& list : microbatches)
      for (auto i : list)
        if (i >= samples.size()) throw error("step_batch: sample index " + std::to_string(i) + " out of range");
  }
};

//! Splits `count` samples into `parts` contiguous index lists whose sizes differ by
//! at most one (a data-blind split, for tests and examples).
[[nodiscard]] inline std::vector<std::vector<std::uint32_t>> contiguous_microbatches(std::size_t count,
                                                                                    std::uint32_t parts) {
  std::vector<std::vector<std::uint32_t>> lists(parts);
  std::size_t next = 0;
  for (std::uint32_t p = 0; p < parts; ++p) {
    const std::size_t size = count / parts + (p < count % parts ? 1 : 0);
    for (std::size_t i = 0; i < size; ++i) lists[p].push_back(static_cast<std::uint32_t>(next++));
  }
  return lists;
}

}  // namespace dflop
