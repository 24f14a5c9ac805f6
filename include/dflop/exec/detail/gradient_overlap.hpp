// SPDX-License-Identifier: Apache-2.0
//! \file
//! The executor's side of overlapped gradient reduction: a stage, in its last
//! gradient-producing op of the step, says a gradient buffer is final
//! (`stage_context::gradients_ready`); the executor starts that buffer's
//! data-parallel sum at once on a communicator that can (`starts_all_reduce`),
//! so it runs while the stage computes the rest (an MPI sum moves on inside MPI
//! calls: each later `gradients_ready` tests the sums started before), and
//! waits for it at the step's end. Under the distributed optimizer the started
//! sum is a reduce-scatter (`starts_reduce_scatter`). Buffers never said final
//! are summed at the end as before, and so is everything on a communicator that
//! cannot start the sum without waiting.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/stage.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace dflop::detail {

//! How a stage's gradients are summed over its data-parallel group: all-reduced,
//! or reduce-scattered for the distributed optimizer (each member's shard).
enum class gradient_reduction { all_reduce, reduce_scatter };

//! Whether `Communicator` can start a `how` reduction and return at once.
template <class Communicator>
constexpr bool starts_reduction(gradient_reduction how) noexcept {
  return how == gradient_reduction::all_reduce ? starts_all_reduce<Communicator>
                                               : starts_reduce_scatter<Communicator>;
}

//! One rank's started gradient sums for one step over its data-parallel group.
template <class Communicator>
class gradient_overlap final : public gradient_sink {
public:
  //! A new step whose sums run over `group` as `how` says.
  void begin_step(Communicator& group, gradient_reduction how = gradient_reduction::all_reduce) {
    group_ = &group;
    how_ = how;
    started_.clear();
    said_.clear();
  }

  //! Starts `buffer`'s sum now (when the communicator can), else leaves it to
  //! the step's end. Throws `dflop::error` for a buffer said final before (or
  //! overlapping one that was), on every communicator alike.
  void ready(const gradient_buffer& buffer) override {
    for (const said& earlier : said_)
      if (overlaps(earlier.buffer, buffer))
        throw error("gradients_ready: a gradient buffer was said final twice in one step (or overlaps one that was)");
    if (starts_reduction<Communicator>(how_)) {
      // Sums started earlier move on inside communicator calls (MPI progresses
      // them so): testing them here lets them run while the stage computes.
      for (auto& request : started_) (void)group_->test(request);
      started_.push_back(start(buffer));
    }
    said_.push_back({buffer, false});
  }

  //! Whether `buffer` (one of a stage's `gradients()`) has its sum started this
  //! step. Throws `dflop::error` when a buffer said final covers only part of
  //! it: summing the rest would sum that part twice.
  [[nodiscard]] bool started(const gradient_buffer& buffer) {
    for (said& earlier : said_) {
      if (earlier.buffer.data == buffer.data && earlier.buffer.count == buffer.count &&
          earlier.buffer.type == buffer.type) {
        earlier.matched = true;
        return starts_reduction<Communicator>(how_);
      }
      if (overlaps(earlier.buffer, buffer))
        throw error("gradients_ready: a buffer said final covers part of a gradients() buffer; say final exactly "
                    "the buffers gradients() returns (return one per bucket)");
    }
    return false;
  }

  //! How many sums the stages started this step (before `finish`).
  [[nodiscard]] std::size_t started_sums() const noexcept { return started_.size(); }

  //! Waits for every started sum. Throws `dflop::error` when a buffer said final
  //! is none of the stage's `gradients()` (the sum was written into memory the
  //! stage may not hold any more).
  void finish() {
    for (auto& request : started_) group_->wait(request, group_->resource());
    for (const said& earlier : said_)
      if (!earlier.matched)
        throw error("gradients_ready: a buffer said final (" + std::to_string(earlier.buffer.count) +
                    " elements) is none of the buffers the stage's gradients() returns");
    started_.clear();
    said_.clear();
  }

private:
  struct said {
    gradient_buffer buffer;
    bool matched = false;  // found among the stage's gradients() at the step's end
  };

  // Starts `buffer`'s reduction (only called where `starts_reduction` says it can).
  typename Communicator::request start(const gradient_buffer& buffer) {
    if constexpr (starts_reduce_scatter<Communicator>)
      if (how_ == gradient_reduction::reduce_scatter) return group_->reduce_scatter_sum_start(buffer, group_->resource());
    if constexpr (starts_all_reduce<Communicator>)
      if (how_ == gradient_reduction::all_reduce) return group_->all_reduce_sum_start(buffer, group_->resource());
    throw error("gradients_ready: this communicator cannot start the reduction");
  }

  static bool overlaps(const gradient_buffer& a, const gradient_buffer& b) noexcept {
    const auto* a_begin = static_cast<const std::byte*>(a.data);
    const auto* b_begin = static_cast<const std::byte*>(b.data);
    return a.bytes() > 0 && b.bytes() > 0 && a_begin < b_begin + b.bytes() && b_begin < a_begin + a.bytes();
  }

  Communicator* group_ = nullptr;
  gradient_reduction how_ = gradient_reduction::all_reduce;
  std::vector<typename Communicator::request> started_;
  std::vector<said> said_;
};

}  // namespace dflop::detail
