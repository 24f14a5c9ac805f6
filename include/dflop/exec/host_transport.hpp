// SPDX-License-Identifier: Apache-2.0
//! \file
//! How in-process ranks move bytes when their memory is the host's: a message is
//! copied the moment its send and receive are both posted, and a data-parallel
//! sum is done by the last member to arrive. The transport of `inproc_communicator`;
//! `stream_communicator` (dflop/cuda/) has a device transport with the same members.
//!
//! A transport for `basic_inproc_communicator` provides (see inproc_communicator.hpp):
//! - `resource_type`, `resource()`: what stages run on (here the calling thread);
//! - `request_state`: per send/receive state, derived from `detail::inproc_request_state`;
//! - `mark(state, resource)`: called when a send or receive is posted, before it can
//!   be matched (a device transport records where the stream stands);
//! - `copy(from, to, bytes, sent, received)`: called under the world's lock by the
//!   rank whose post completed the match;
//! - `finished(state)`, `order_after(state, resource)`: a matched transfer's
//!   completion, and making `resource` wait for it;
//! - `arrive(buffer, resource)`, `reduce(parts, arrivals, like)`, `order_after_reduce(done, resource)`:
//!   the pieces of an all-reduce (each member arrives; the last one sums every
//!   member's buffer in member order and writes the sum back to all of them);
//! - `settle(resource, seconds, rank)`: before a host-side collective, wait for the
//!   work issued on `resource` (throwing `watchdog_timeout` after `seconds`);
//! - `allocate(bytes)`, `deallocate(pointer, bytes)`: memory it can move.
#pragma once

#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/gradient_shard.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>

namespace dflop {

namespace detail {
//! Completion state of one in-process send or receive (transports derive from it).
struct inproc_request_state {
  inproc_request_state() = default;
  inproc_request_state(const inproc_request_state&) = delete;
  inproc_request_state& operator=(const inproc_request_state&) = delete;
  virtual ~inproc_request_state() = default;
  std::atomic<bool> done = false;  //!< matched and its copy issued (read without the lock while spinning)
  std::string error;               //!< non-empty when the transfer failed (size mismatch)
  //! What a wait on it waits for, as a watchdog timeout names it.
  const char* waits_for = "a message";
};

//! Sums `parts[1..]` into `parts[0]` in member order, then copies the sum into every
//! other part: the same result on every member, whatever the arrival order.
template <class T>
void sum_into_every_part(std::span<void* const> parts, std::size_t count) {
  T* sum = static_cast<T*>(parts[0]);
  for (std::size_t k = 1; k < parts.size(); ++k) {
    const T* values = static_cast<const T*>(parts[k]);
    for (std::size_t i = 0; i < count; ++i) sum[i] += values[i];
  }
  for (std::size_t k = 1; k < parts.size(); ++k) std::memcpy(parts[k], sum, count * sizeof(T));
}

//! Member i's shard of `parts` (each `count` elements, `shard_of` split) becomes
//! the sum of every part's shard i, added in member order as
//! `sum_into_every_part` adds (so the values equal an all-reduce's); the common
//! remainder becomes that sum in every part. Other elements are left as they are.
template <class T>
void sum_shards(std::span<void* const> parts, std::size_t count) {
  const auto members = static_cast<int>(parts.size());
  const auto sum_into = [&](std::size_t begin, std::size_t end, auto&& targets) {
    for (std::size_t j = begin; j < end; ++j) {
      T sum = static_cast<const T*>(parts[0])[j];
      for (std::size_t k = 1; k < parts.size(); ++k) sum += static_cast<const T*>(parts[k])[j];
      targets(j, sum);
    }
  };
  for (int i = 0; i < members; ++i) {
    const gradient_shard shard = shard_of(count, members, i);
    T* own = static_cast<T*>(parts[static_cast<std::size_t>(i)]);
    sum_into(shard.begin, shard.end, [&](std::size_t j, T sum) { own[j] = sum; });
  }
  const gradient_shard any = shard_of(count, members, 0);
  sum_into(any.common_begin, count, [&](std::size_t j, T sum) {
    for (void* part : parts) static_cast<T*>(part)[j] = sum;
  });
}

//! Every part's shard i becomes part i's shard i (`shard_of` split of `count`
//! elements of `bytes` each); the common remainder is left as it is.
inline void gather_shards(std::span<void* const> parts, std::size_t count, std::size_t bytes) {
  const auto members = static_cast<int>(parts.size());
  for (int i = 0; i < members; ++i) {
    const gradient_shard shard = shard_of(count, members, i);
    if (shard.end == shard.begin) continue;  // empty shards (an empty buffer's data may be null: no memcpy)
    const auto* own = static_cast<const std::byte*>(parts[static_cast<std::size_t>(i)]) + shard.begin * bytes;
    for (int k = 0; k < members; ++k)
      if (k != i)
        std::memcpy(static_cast<std::byte*>(parts[static_cast<std::size_t>(k)]) + shard.begin * bytes, own,
                    (shard.end - shard.begin) * bytes);
  }
}
}  // namespace detail

//! The host-memory transport of `inproc_communicator` (see the file comment).
struct host_transport {
  //! Host stages run on the calling thread.
  using resource_type = host_thread;
  //! Nothing beyond the common completion state.
  using request_state = detail::inproc_request_state;

  //! The calling thread.
  [[nodiscard]] host_thread resource() const noexcept { return {}; }
  //! Nothing to record: host data is ready when the call is made.
  void mark(request_state&, host_thread) const noexcept {}
  //! Copies the message (the sender's buffer must stay alive until then).
  void copy(const std::byte* from, std::byte* to, std::size_t bytes, request_state&, request_state&) const noexcept {
    if (bytes > 0) std::memcpy(to, from, bytes);
  }
  //! Done once copied.
  [[nodiscard]] bool finished(const request_state& state) const noexcept { return state.done.load(); }
  //! Nothing to order: the copy happened before `done` was set.
  void order_after(const request_state&, host_thread) const noexcept {}

  //! Nothing to record on arrival.
  [[nodiscard]] std::shared_ptr<void> arrive(const gradient_buffer&, host_thread) const noexcept { return {}; }
  //! Sums in member order into every part (the other members are blocked meanwhile).
  [[nodiscard]] std::shared_ptr<void> reduce(std::span<void* const> parts, std::span<const std::shared_ptr<void>>,
                                             const gradient_buffer& like) const {
    if (like.count == 0) return {};
    if (like.type == element_type::float64) detail::sum_into_every_part<double>(parts, like.count);
    else detail::sum_into_every_part<float>(parts, like.count);
    return {};
  }
  //! Nothing to order: the sum is written before the members are woken.
  void order_after_reduce(const std::shared_ptr<void>&, host_thread) const noexcept {}
  //! Nothing pending on a thread.
  void settle(host_thread, double, int) const noexcept {}

  //! 64-byte aligned host memory.
  [[nodiscard]] std::byte* allocate(std::size_t bytes) const {
    return static_cast<std::byte*>(::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{64}));
  }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t) const noexcept { ::operator delete(pointer, std::align_val_t{64}); }
};

}  // namespace dflop
