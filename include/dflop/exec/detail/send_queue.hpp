// SPDX-License-Identifier: Apache-2.0
//! \file
//! Sends in flight and the pool blocks they read from. A block may feed several
//! sends (hand-off slices of one encoder output, a TP broadcast of a record's
//! input) and stay in use by its owner meanwhile: it goes back to the pool only
//! when its owner released it and its last send has finished.
#pragma once

#include <dflop/exec/buffer_pool.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace dflop::detail {

//! Sends in flight over `Communicator`, and the blocks they keep alive.
template <class Communicator>
class send_queue {
public:
  //! Returns finished blocks to `pool` (which must outlive the queue).
  explicit send_queue(buffer_pool<Communicator>& pool) noexcept : pool_(&pool) {}

  //! Starts sending `bytes` (a range of `block`) to `peer`; `block` stays alive until this send finished.
  void send(Communicator& comm, int peer, int tag, std::span<const std::byte> bytes, const pooled_buffer& block) {
    auto handle = comm.send(peer, tag, bytes, comm.resource());
    if (block.data != nullptr) ++held_of(block).sends;
    sends_.push_back({std::move(handle), block.data});
  }

  //! Gives `block` back to the pool, now or when its last send finishes; empties `block`.
  void release(pooled_buffer& block) {
    if (block.data == nullptr) return;
    for (std::size_t i = 0; i < held_.size(); ++i)
      if (held_[i].buffer.data == block.data) {
        held_[i].released = true;
        if (held_[i].sends == 0) drop(i);
        block = {};
        return;
      }
    pool_->release(block);
  }

  //! Retires finished sends (with `all`, waits for every one first) and frees their blocks.
  void reap(Communicator& comm, bool all) {
    std::size_t kept = 0;
    for (auto& s : sends_) {
      if (all) comm.wait(s.handle, comm.resource());
      if (all || comm.test(s.handle)) finished(s.block);
      else sends_[kept++] = std::move(s);
    }
    sends_.resize(kept);
  }

  //! Whether no send is in flight.
  [[nodiscard]] bool empty() const noexcept { return sends_.empty(); }

private:
  struct in_flight {
    typename Communicator::request handle;
    std::byte* block;
  };
  struct held {
    pooled_buffer buffer;
    std::size_t sends = 0;
    bool released = false;
  };

  held& held_of(const pooled_buffer& block) {
    for (auto& h : held_)
      if (h.buffer.data == block.data) return h;
    held_.push_back({block, 0, false});
    return held_.back();
  }
  void finished(std::byte* block) {
    if (block == nullptr) return;
    for (std::size_t i = 0; i < held_.size(); ++i)
      if (held_[i].buffer.data == block) {
        if (--held_[i].sends == 0 && held_[i].released) drop(i);
        return;
      }
  }
  void drop(std::size_t i) {
    pool_->release(held_[i].buffer);
    held_[i] = held_.back();
    held_.pop_back();
  }

  buffer_pool<Communicator>* pool_;
  std::vector<in_flight> sends_;
  std::vector<held> held_;
};

}  // namespace dflop::detail
