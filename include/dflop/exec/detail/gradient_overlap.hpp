// SPDX-License-Identifier: Apache-2.0
//! \file
//! The executor's side of overlapped gradient reduction: a stage, in its last
//! gradient-producing op of the step, says a gradient buffer is final
//! (`stage_context::gradients_ready`); the executor starts that buffer's
//! data-parallel sum at once on a communicator that can (`starts_all_reduce`),
//! so it runs while the stage computes the rest, and waits for it at the step's
//! end. Buffers never said final are summed at the end as before, and so is
//! everything on a communicator that cannot start a sum without waiting.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <vector>

namespace dflop::detail {

//! One rank's started gradient sums for one step over its data-parallel group.
template <class Communicator>
class gradient_overlap final : public gradient_sink {
public:
  //! A new step whose sums run over `group`.
  void begin_step(Communicator& group) {
    group_ = &group;
    started_.clear();
    buffers_.clear();
  }

  //! Starts `buffer`'s sum now (when the communicator can), else leaves it to the step's end.
  void ready(const gradient_buffer& buffer) override {
    if constexpr (starts_all_reduce<Communicator>) {
      if (started(buffer.data))
        throw error("gradients_ready: a gradient buffer was said final twice in one step");
      buffers_.push_back(buffer.data);
      started_.push_back(group_->all_reduce_sum_start(buffer, group_->resource()));
    }
  }

  //! Whether the buffer at `data` has its sum started this step.
  [[nodiscard]] bool started(const void* data) const noexcept {
    return std::find(buffers_.begin(), buffers_.end(), data) != buffers_.end();
  }

  //! Sums started this step.
  [[nodiscard]] std::size_t count() const noexcept { return started_.size(); }

  //! Waits for every started sum.
  void finish() {
    for (auto& request : started_) group_->wait(request, group_->resource());
    started_.clear();
    buffers_.clear();
  }

private:
  Communicator* group_ = nullptr;
  std::vector<typename Communicator::request> started_;
  std::vector<const void*> buffers_;
};

}  // namespace dflop::detail
