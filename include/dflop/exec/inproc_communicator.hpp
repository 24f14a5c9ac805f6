// SPDX-License-Identifier: Apache-2.0
//! \file
//! The in-process communicator model: ranks are threads of one process sharing an
//! `inproc_world`. Messages are matched by (communicator, source, destination,
//! tag) in posting order and copied once; collectives sum in member order, so
//! results never depend on thread timing. `run_inproc` starts one thread per rank
//! and, when any rank fails, cancels the others and rethrows the original error.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop {

namespace detail {
//! Completion state of one in-process send or receive.
struct inproc_request_state {
  std::atomic<bool> done = false;  //!< the data has been copied (read without the lock while spinning)
  std::string error;  //!< non-empty when the transfer failed (size mismatch)
};

//! A posted, not yet matched send or receive.
struct inproc_pending {
  const std::byte* send_data = nullptr;  //!< the send's data (sends only)
  std::byte* receive_data = nullptr;     //!< the receive's buffer (receives only)
  std::size_t bytes = 0;                 //!< its size
  int owner = 0;                         //!< world rank that posted it (to wake)
  std::shared_ptr<inproc_request_state> state;
};

//! A mailbox: posted sends and receives of one (communicator, source, destination, tag).
struct inproc_mailbox {
  std::deque<inproc_pending> sends;     //!< unmatched sends, oldest first
  std::deque<inproc_pending> receives;  //!< unmatched receives, oldest first
};

//! One in-flight collective (all-reduce or split) of a communicator.
struct inproc_collective {
  int arrived = 0;                          //!< members that deposited their part
  int departed = 0;                         //!< members that took the result
  bool done = false;                        //!< the result is ready
  std::vector<const void*> parts;           //!< all-reduce: each member's buffer
  std::vector<std::pair<int, int>> colors;  //!< split: each member's (color, key)
  std::vector<double> sum64;                //!< all-reduce result (float64)
  std::vector<float> sum32;                 //!< all-reduce result (float32)
  std::vector<std::tuple<int, std::vector<int>, int>> groups;  //!< split result per member: id, members, index
};
}  // namespace detail

//! Shared state of the threads of one in-process run: mailboxes, collectives, the
//! abort flag and the first failure. Outlives every `inproc_communicator` made from it.
class inproc_world {
public:
  //! A world of `size` ranks; waits give up after `watchdog_seconds`.
  explicit inproc_world(int size, double watchdog_seconds = default_watchdog_seconds)
      : size_(size), wake_(std::make_unique<std::condition_variable[]>(static_cast<std::size_t>(size))),
        watchdog_(watchdog_seconds) {
    if (size <= 0) throw error("inproc_world: needs at least one rank");
  }
  inproc_world(const inproc_world&) = delete;
  inproc_world& operator=(const inproc_world&) = delete;

  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }

  //! Stops every rank: their waits throw `pipeline_aborted`. Keeps the first failure.
  void abort(std::exception_ptr failure) noexcept {
    std::lock_guard lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    failure_ = failure;
    try {
      if (failure) std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      failure_text_ = e.what();
    } catch (...) {
      failure_text_ = "unknown exception";
    }
    for (int r = 0; r < size_; ++r) wake_[static_cast<std::size_t>(r)].notify_all();
  }

  //! Whether some rank aborted.
  [[nodiscard]] bool aborted() const {
    std::lock_guard lock(mutex_);
    return aborted_;
  }

  //! The first failure passed to `abort` (null when none).
  [[nodiscard]] std::exception_ptr failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  //! Changes the watchdog for later waits.
  void set_watchdog(double seconds) {
    std::lock_guard lock(mutex_);
    watchdog_ = seconds;
  }

private:
  friend class inproc_communicator;
  using key = std::tuple<int, int, int, int>;  // communicator, source, destination, tag

  // Waits on `rank`'s condition until `ready()`; throws when aborted or after the watchdog.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, int rank, Ready ready, const char* what) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(watchdog_));
    auto& wake = wake_[static_cast<std::size_t>(rank)];
    while (true) {
      if (aborted_) throw pipeline_aborted("rank " + std::to_string(rank) + " stopped: " + failure_text_);
      if (ready()) return;
      if (wake.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !aborted_) {
        std::string text("rank ");
        text.append(std::to_string(rank)).append(": watchdog: no progress for ");
        text.append(std::to_string(watchdog_)).append(" s waiting for ").append(what);
        throw watchdog_timeout(text);
      }
    }
  }
  void wake(int rank) { wake_[static_cast<std::size_t>(rank)].notify_all(); }

  int size_;
  mutable std::mutex mutex_;
  std::unique_ptr<std::condition_variable[]> wake_;
  double watchdog_;
  bool aborted_ = false;
  std::exception_ptr failure_;
  std::string failure_text_;
  int next_communicator_ = 1;
  std::map<key, detail::inproc_mailbox> mailboxes_;
  std::map<std::pair<int, std::uint64_t>, detail::inproc_collective> collectives_;
};

//! One rank's handle on an `inproc_world` (or on a group split from it). Models `communicator`.
class inproc_communicator {
public:
  //! A send or receive in flight.
  using request = std::shared_ptr<detail::inproc_request_state>;
  //! Host stages run on the calling thread.
  using resource_type = host_thread;

  //! Rank `rank` of the whole world.
  inproc_communicator(inproc_world& world, int rank) : world_(&world), id_(0), index_(rank) {
    if (rank < 0 || rank >= world.size()) throw error("inproc_communicator: rank out of range");
    members_.resize(static_cast<std::size_t>(world.size()));
    for (int r = 0; r < world.size(); ++r) members_[static_cast<std::size_t>(r)] = r;
  }

  //! This rank in the communicator.
  [[nodiscard]] int rank() const noexcept { return index_; }
  //! Ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(members_.size()); }
  //! Largest tag (any int).
  [[nodiscard]] int max_tag() const noexcept { return 0x7fffffff; }
  //! The calling thread.
  [[nodiscard]] host_thread resource() const noexcept { return {}; }
  //! The rank's world.
  [[nodiscard]] inproc_world& world() const noexcept { return *world_; }

  //! Starts sending `data` to `peer` (copied when the receive is matched; keep it alive until then).
  request send(int peer, int tag, std::span<const std::byte> data, host_thread = {}) {
    return post(peer, tag, data.data(), nullptr, data.size(), true);
  }
  //! Starts receiving exactly `data.size()` bytes from `peer`.
  request receive(int peer, int tag, std::span<std::byte> data, host_thread = {}) {
    return post(peer, tag, nullptr, data.data(), data.size(), false);
  }
  //! Whether the transfer finished.
  [[nodiscard]] bool test(request& r) {
    std::lock_guard lock(world_->mutex_);
    return r->done.load();
  }
  //! Blocks until the transfer finished; throws on abort, watchdog or size mismatch.
  void wait(request& r, host_thread = {}) {
    // A short spin first: a peer usually answers within microseconds, and a
    // blocking wait costs a futex round trip on both sides.
    for (int spin = 0; spin < 200 && !r->done.load(std::memory_order_acquire); ++spin) std::this_thread::yield();
    std::unique_lock lock(world_->mutex_);
    world_->wait(lock, global(), [&] { return r->done.load(); }, "a message");
    if (!r->error.empty()) throw error(r->error);
  }

  //! Sums `buffer` over all ranks in place (member order, so deterministic).
  void all_reduce_sum(const gradient_buffer& buffer, host_thread = {}) {
    if (size() == 1) return;
    std::unique_lock lock(world_->mutex_);
    auto& state = world_->collectives_[{id_, sequence_++}];
    const auto key = std::pair{id_, sequence_ - 1};
    if (state.parts.empty()) state.parts.resize(members_.size());
    state.parts[static_cast<std::size_t>(index_)] = buffer.data;
    if (++state.arrived == size()) {
      if (buffer.type == element_type::float64) sum_parts<double>(state, state.sum64, buffer.count);
      else sum_parts<float>(state, state.sum32, buffer.count);
      state.done = true;
      for (int member : members_) world_->wake(member);
    } else {
      world_->wait(lock, global(), [&] { return state.done; }, "an all-reduce");
    }
    // An empty buffer still takes part (every member calls the collective) but copies nothing.
    if (buffer.bytes() > 0) {
      if (buffer.type == element_type::float64) std::memcpy(buffer.data, state.sum64.data(), buffer.bytes());
      else std::memcpy(buffer.data, state.sum32.data(), buffer.bytes());
    }
    if (++state.departed == size()) world_->collectives_.erase(key);
  }

  //! Sums one host value over all ranks.
  [[nodiscard]] double all_reduce_value(double value) {
    all_reduce_sum(gradient_buffer::of(std::span<double>(&value, 1)));
    return value;
  }

  //! MPI_Comm_split: ranks with the same `color` form a communicator, ordered by (key, rank).
  [[nodiscard]] inproc_communicator split(int color, int key) {
    std::unique_lock lock(world_->mutex_);
    const auto at = std::pair{id_, sequence_++};
    auto& state = world_->collectives_[at];
    if (state.colors.empty()) state.colors.resize(members_.size());
    state.colors[static_cast<std::size_t>(index_)] = {color, key};
    if (++state.arrived == size()) {
      state.groups.resize(members_.size());
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, index)
      for (std::size_t i = 0; i < state.colors.size(); ++i)
        by_color[state.colors[i].first].push_back({state.colors[i].second, static_cast<int>(i)});
      for (auto& [c, list] : by_color) {
        std::sort(list.begin(), list.end());
        const int id = world_->next_communicator_++;
        std::vector<int> globals;
        for (auto& entry : list) globals.push_back(members_[static_cast<std::size_t>(entry.second)]);
        for (std::size_t position = 0; position < list.size(); ++position)
          state.groups[static_cast<std::size_t>(list[position].second)] = {id, globals, static_cast<int>(position)};
      }
      state.done = true;
      for (int member : members_) world_->wake(member);
    } else {
      world_->wait(lock, global(), [&] { return state.done; }, "a split");
    }
    inproc_communicator result(*this);
    auto& [id, globals, position] = state.groups[static_cast<std::size_t>(index_)];
    result.id_ = id;
    result.members_ = globals;
    result.index_ = position;
    result.sequence_ = 0;
    if (++state.departed == size()) world_->collectives_.erase(at);
    return result;
  }

  //! Stops every rank of the world; keeps the first failure for `run_inproc` to rethrow.
  void abort(std::exception_ptr failure) noexcept { world_->abort(failure); }
  //! Changes the world's watchdog.
  void set_watchdog(double seconds) { world_->set_watchdog(seconds); }

  //! 64-byte aligned host memory.
  [[nodiscard]] std::byte* allocate(std::size_t bytes) {
    return static_cast<std::byte*>(::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{64}));
  }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t) noexcept { ::operator delete(pointer, std::align_val_t{64}); }

private:
  [[nodiscard]] int global() const noexcept { return members_[static_cast<std::size_t>(index_)]; }

  template <class T>
  void sum_parts(const detail::inproc_collective& state, std::vector<T>& sum, std::size_t count) {
    sum.assign(count, T{});
    for (const void* part : state.parts) {
      const T* values = static_cast<const T*>(part);
      for (std::size_t i = 0; i < count; ++i) sum[i] += values[i];
    }
  }

  request post(int peer, int tag, const std::byte* send_data, std::byte* receive_data, std::size_t bytes,
               bool is_send) {
    if (peer < 0 || peer >= size()) throw error("inproc_communicator: peer out of range");
    auto state = std::make_shared<detail::inproc_request_state>();
    std::lock_guard lock(world_->mutex_);
    if (world_->aborted_) throw pipeline_aborted("rank " + std::to_string(global()) + " stopped: " + world_->failure_text_);
    const int source = is_send ? index_ : peer;
    const int destination = is_send ? peer : index_;
    auto& box = world_->mailboxes_[{id_, source, destination, tag}];
    auto& other = is_send ? box.receives : box.sends;
    if (other.empty()) {
      (is_send ? box.sends : box.receives).push_back({send_data, receive_data, bytes, global(), state});
      return state;
    }
    detail::inproc_pending match = std::move(other.front());
    other.pop_front();
    const std::size_t send_bytes = is_send ? bytes : match.bytes;
    const std::size_t receive_bytes = is_send ? match.bytes : bytes;
    if (send_bytes != receive_bytes) {
      std::string text("message size mismatch from rank ");
      text.append(std::to_string(members_[static_cast<std::size_t>(source)])).append(" to rank ");
      text.append(std::to_string(members_[static_cast<std::size_t>(destination)])).append(" tag ");
      text.append(std::to_string(tag)).append(": sent ").append(std::to_string(send_bytes));
      text.append(" bytes, expected ").append(std::to_string(receive_bytes));
      state->error = text;
      match.state->error = text;
    } else if (bytes > 0) {
      std::memcpy(is_send ? match.receive_data : receive_data, is_send ? send_data : match.send_data, bytes);
    }
    state->done.store(true, std::memory_order_release);
    match.state->done.store(true, std::memory_order_release);
    world_->wake(match.owner);
    return state;
  }

  inproc_world* world_;
  int id_;
  std::vector<int> members_;  // world ranks, by rank in this communicator
  int index_;
  std::uint64_t sequence_ = 0;  // collectives issued on this communicator
};
static_assert(communicator<inproc_communicator>);

//! Runs `body(inproc_communicator&)` on `ranks` threads, one per rank, and waits for
//! all. When any rank throws, every other rank is stopped (its waits throw) and the
//! first original exception is rethrown here. A stage that never returns cannot be
//! cancelled in-process: the other ranks stop after the watchdog, the join waits for it.
template <class Body>
void run_inproc(int ranks, Body&& body, double watchdog_seconds = default_watchdog_seconds) {
  inproc_world world(ranks, watchdog_seconds);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&world, &body, rank] {
      try {
        inproc_communicator comm(world, rank);
        body(comm);
      } catch (...) {
        world.abort(std::current_exception());
      }
    });
  for (auto& thread : threads) thread.join();
  if (auto failure = world.failure()) std::rethrow_exception(failure);
}

}  // namespace dflop
