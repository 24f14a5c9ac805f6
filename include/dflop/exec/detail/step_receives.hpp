// SPDX-License-Identifier: Apache-2.0
//! \file
//! What a rank keeps per (microbatch, chunk) between its ops, and the receives a
//! step posts into those records: planned once per step from the schedule and the
//! samples (sizes are known, no handshake), posted a few ops before they are
//! needed, and, for communicators that match in posting order (NCCL), per peer in
//! the order the peer sends. Shared by `executor` and `multimodal_executor`.
#pragma once

#include <dflop/exec/buffer_pool.hpp>
#include <dflop/exec/communicator.hpp>

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <vector>

namespace dflop::detail {

//! One (microbatch, chunk) on a rank: its activations in and gradients in, the
//! receives still to wait for, and the blocks its stage stashed.
template <class Communicator>
struct op_record {
  using request = typename Communicator::request;  //!< a transfer in flight
  pooled_buffer input;                   //!< F's input (received, assembled from several messages, or handed over)
  pooled_buffer output_grad;             //!< B's incoming gradient
  std::vector<request> input_requests;   //!< receives into `input` not yet waited for
  std::vector<request> grad_requests;    //!< receives into `output_grad` not yet waited for
  std::vector<pooled_buffer> stash;      //!< blocks kept for the backward
};

//! Waits for (and forgets) every request in `requests`.
template <class Communicator>
void wait_all(Communicator& comm, std::vector<typename Communicator::request>& requests,
              typename Communicator::resource_type resource) {
  for (auto& request : requests) comm.wait(request, resource);
  requests.clear();
}

//! One receive of a step: `bytes` from `peer` into `[offset, offset + bytes)` of
//! record `record`'s input (or output gradient), a buffer of `total` bytes that
//! the first receive into it acquires. Several receives may fill one record.
struct planned_receive {
  std::size_t needed_at = 0;  //!< index of the op that consumes it
  std::size_t sent_at = 0;    //!< index of the sending op on the sender (orders in-order communicators)
  int peer = 0;               //!< sender's rank
  int tag = 0;                //!< message tag
  std::size_t record = 0;     //!< which record it fills
  std::size_t offset = 0;     //!< where in the record's buffer
  std::size_t bytes = 0;      //!< message size
  std::size_t total = 0;      //!< the record buffer's size
  bool gradient = false;      //!< fills `output_grad` (else `input`)
  bool posted = false;        //!< already posted
};

//! A step's receives, in the order of the ops that need them.
template <class Communicator>
class step_receives {
public:
  //! Forgets the previous step's receives.
  void clear() {
    receives_.clear();
    next_ = 0;
  }
  //! Adds a receive; add them in `needed_at` order.
  void add(const planned_receive& receive) { receives_.push_back(receive); }
  //! Call after the last `add`: for in-order communicators, ranks each peer's receives by send order.
  void finish() {
    if constexpr (matches_in_order<Communicator>) {
      peer_order_.resize(receives_.size());
      for (std::size_t k = 0; k < receives_.size(); ++k) peer_order_[k] = k;
      std::stable_sort(peer_order_.begin(), peer_order_.end(), [&](std::size_t a, std::size_t b) {
        return std::tie(receives_[a].peer, receives_[a].sent_at) < std::tie(receives_[b].peer, receives_[b].sent_at);
      });
      rank_in_peer_.resize(receives_.size());
      for (std::size_t k = 0; k < peer_order_.size(); ++k) rank_in_peer_[peer_order_[k]] = k;
    }
  }
  //! Posts every receive needed by op `until` or earlier into `records`; returns how many it posted.
  std::size_t post_until(std::size_t until, Communicator& comm, buffer_pool<Communicator>& pool,
                         std::vector<op_record<Communicator>>& records) {
    std::size_t posted = 0;
    while (next_ < receives_.size() && receives_[next_].needed_at <= until)
      posted += post(receives_[next_++], comm, pool, records);
    return posted;
  }
  //! Receives planned this step.
  [[nodiscard]] std::size_t size() const noexcept { return receives_.size(); }

private:
  std::size_t post(planned_receive& r, Communicator& comm, buffer_pool<Communicator>& pool,
                   std::vector<op_record<Communicator>>& records) {
    if (r.posted) return 0;
    std::size_t posted = 0;
    if constexpr (matches_in_order<Communicator>) {
      // Post every earlier receive from the same peer first.
      const std::size_t at = rank_in_peer_[static_cast<std::size_t>(&r - receives_.data())];
      std::size_t first = at;
      while (first > 0 && receives_[peer_order_[first - 1]].peer == r.peer && !receives_[peer_order_[first - 1]].posted)
        --first;
      for (std::size_t k = first; k < at; ++k) posted += post_now(receives_[peer_order_[k]], comm, pool, records);
    }
    return posted + post_now(r, comm, pool, records);
  }
  static std::size_t post_now(planned_receive& r, Communicator& comm, buffer_pool<Communicator>& pool,
                              std::vector<op_record<Communicator>>& records) {
    r.posted = true;
    auto& record = records[r.record];
    auto& buffer = r.gradient ? record.output_grad : record.input;
    if (buffer.data == nullptr) buffer = pool.acquire(r.total);
    auto handle = comm.receive(r.peer, r.tag, buffer.bytes().subspan(r.offset, r.bytes), comm.resource());
    (r.gradient ? record.grad_requests : record.input_requests).push_back(std::move(handle));
    return 1;
  }

  std::vector<planned_receive> receives_;
  std::size_t next_ = 0;
  std::vector<std::size_t> peer_order_;
  std::vector<std::size_t> rank_in_peer_;
};

}  // namespace dflop::detail
