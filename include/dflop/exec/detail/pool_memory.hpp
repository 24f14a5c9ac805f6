// SPDX-License-Identifier: Apache-2.0
//! \file
//! The `stage_memory` executors lend their stages: stashes and scratch blocks
//! from the executor's buffer pool, so a steady state allocates nothing.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/buffer_pool.hpp>
#include <dflop/exec/stage.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace dflop::detail {

//! Stash and scratch memory from a `buffer_pool`. Point `stash` at the running
//! op's record before each call; `end_op` returns the scratch blocks.
template <class Communicator>
class pool_memory final : public stage_memory {
public:
  //! Memory from `pool` (which must outlive it).
  explicit pool_memory(buffer_pool<Communicator>& pool) noexcept : pool_(&pool) {}
  pool_memory(const pool_memory&) = delete;
  pool_memory& operator=(const pool_memory&) = delete;
  ~pool_memory() { end_op(); }

  std::span<std::byte> stash(std::size_t bytes) override {
    stash_->push_back(pool_->acquire(bytes));
    return stash_->back().bytes();
  }
  std::span<std::byte> stashed(std::size_t index) override {
    if (index >= stash_->size()) throw error("stage_context::stashed: no block " + std::to_string(index));
    return (*stash_)[index].bytes();
  }
  std::span<std::byte> scratch(std::size_t bytes) override {
    scratch_.push_back(pool_->acquire(bytes));
    return scratch_.back().bytes();
  }
  //! Gives the op's scratch blocks back.
  void end_op() {
    for (auto& block : scratch_) pool_->release(block);
    scratch_.clear();
  }

  std::vector<pooled_buffer>* stash_ = nullptr;  //!< the running op's stash list

private:
  buffer_pool<Communicator>* pool_;
  std::vector<pooled_buffer> scratch_;
};

}  // namespace dflop::detail
