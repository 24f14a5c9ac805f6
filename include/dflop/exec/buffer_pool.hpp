// SPDX-License-Identifier: Apache-2.0
//! \file
//! A pool of communication and activation buffers in the communicator's memory:
//! blocks are grouped by power-of-two capacity and handed out again when freed,
//! so after the first steps a run allocates nothing (with varying shapes, it
//! grows to the largest step it has seen, never to a padded maximum per message).
#pragma once

#include <bit>
#include <cstddef>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace dflop {

//! One block lent by a `buffer_pool`: `size` bytes used of `capacity`.
struct pooled_buffer {
  std::byte* data = nullptr;  //!< first byte (null for an empty buffer)
  std::size_t size = 0;       //!< bytes asked for
  std::size_t capacity = 0;   //!< bytes reserved

  //! The used bytes.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {data, size}; }
};

//! Reusable buffers from `Memory` (anything with `allocate(bytes)` returning
//! `std::byte*` and `deallocate(pointer, bytes)`, such as a communicator).
template <class Memory>
class buffer_pool {
public:
  //! A pool drawing from `memory`, which must outlive it.
  explicit buffer_pool(Memory& memory) noexcept : memory_(&memory) {}
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;
  //! Frees every block, lent or not (after a failure, lent ones are never returned).
  ~buffer_pool() {
    for (auto& [block, capacity] : blocks_) memory_->deallocate(block, capacity);
  }

  //! A buffer of `bytes` bytes (an empty one for 0, without allocating).
  [[nodiscard]] pooled_buffer acquire(std::size_t bytes) {
    if (bytes == 0) return {};
    const std::size_t capacity = std::bit_ceil(bytes < 256 ? std::size_t{256} : bytes);
    auto& blocks = free_[capacity];
    if (!blocks.empty()) {
      std::byte* block = blocks.back();
      blocks.pop_back();
      return {block, bytes, capacity};
    }
    reserved_ += capacity;
    std::byte* block = memory_->allocate(capacity);
    blocks_.emplace_back(block, capacity);
    return {block, bytes, capacity};
  }

  //! Gives `buffer` back for reuse (an empty one is ignored).
  void release(pooled_buffer& buffer) {
    if (buffer.data != nullptr) free_[buffer.capacity].push_back(buffer.data);
    buffer = {};
  }

  //! Blocks allocated so far (a steady state adds none).
  [[nodiscard]] std::size_t allocations() const noexcept { return blocks_.size(); }
  //! Bytes reserved so far.
  [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_; }

private:
  Memory* memory_;
  std::map<std::size_t, std::vector<std::byte*>> free_;
  std::vector<std::pair<std::byte*, std::size_t>> blocks_;
  std::size_t reserved_ = 0;
};

}  // namespace dflop
