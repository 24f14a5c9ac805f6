// SPDX-License-Identifier: Apache-2.0
//! \file
//! The in-process communicator model: ranks are threads of one process sharing an
//! `inproc_world`. Messages are matched by (communicator, source, destination,
//! tag) in posting order and copied once; collectives sum in member order, so
//! results never depend on thread timing. `run_inproc` starts one thread per rank
//! and, when any rank fails, cancels the others and rethrows the original error.
//!
//! Matching, splits, collectives, abort and watchdog are written once, over a
//! transport that moves the bytes: `host_transport` (host_transport.hpp) copies
//! host memory; the CUDA `stream_transport` (dflop/cuda/stream_communicator.cuh)
//! copies device memory between the stage streams of one GPU with events, so the
//! host waits only until a message is matched and the streams order the rest.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/host_transport.hpp>
#include <dflop/exec/stage.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop {

namespace detail {
//! A posted, not yet matched send or receive.
template <class State>
struct inproc_pending {
  const std::byte* send_data = nullptr;  //!< the send's data (sends only)
  std::byte* receive_data = nullptr;     //!< the receive's buffer (receives only)
  std::size_t bytes = 0;                 //!< its size
  int owner = 0;                         //!< world rank that posted it (to wake)
  std::shared_ptr<State> state;          //!< shared with the poster's request
};

//! A mailbox: posted sends and receives of one (communicator, source, destination, tag).
template <class State>
struct inproc_mailbox {
  std::deque<inproc_pending<State>> sends;     //!< unmatched sends, oldest first
  std::deque<inproc_pending<State>> receives;  //!< unmatched receives, oldest first
};

//! One in-flight collective (all-reduce or split) of a communicator.
struct inproc_collective {
  int arrived = 0;                                //!< members that deposited their part
  int departed = 0;                               //!< members that took the result
  bool done = false;                              //!< the result is ready
  std::vector<void*> parts;                       //!< all-reduce: each member's buffer
  //! all-reduce: the requests of members that started it without waiting (completed by the last to arrive)
  std::vector<std::shared_ptr<inproc_request_state>> started;
  std::vector<std::shared_ptr<void>> arrivals;    //!< all-reduce: what each member's transport recorded
  std::shared_ptr<void> reduced;                  //!< all-reduce: what the sum's completion is (device: an event)
  std::size_t count = 0;                          //!< all-reduce: elements per member (the first member's)
  element_type type = element_type::float64;      //!< all-reduce: their type (the first member's)
  std::string error;                              //!< all-reduce: why the members' parts disagree
  std::vector<std::pair<int, int>> colors;        //!< split: each member's (color, key)
  std::vector<std::tuple<int, std::vector<int>, int>> groups;  //!< split result per member: id, members, index
};
}  // namespace detail

template <class Transport>
class basic_inproc_communicator;

//! Shared state of the threads of one in-process run: mailboxes, collectives, the
//! abort flag and the first failure. Outlives every communicator made from it.
template <class Transport>
class basic_inproc_world {
public:
  //! A world of `size` ranks; waits give up after `watchdog_seconds`.
  explicit basic_inproc_world(int size, double watchdog_seconds = default_watchdog_seconds)
      : size_(size), wake_(std::make_unique<std::condition_variable[]>(static_cast<std::size_t>(size))),
        watchdog_(watchdog_seconds) {
    if (size <= 0) throw error("inproc_world: needs at least one rank");
  }
  basic_inproc_world(const basic_inproc_world&) = delete;
  basic_inproc_world& operator=(const basic_inproc_world&) = delete;

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

  //! The watchdog in seconds.
  [[nodiscard]] double watchdog() const {
    std::lock_guard lock(mutex_);
    return watchdog_;
  }

private:
  friend class basic_inproc_communicator<Transport>;
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
  std::map<key, detail::inproc_mailbox<typename Transport::request_state>> mailboxes_;
  std::map<std::pair<int, std::uint64_t>, detail::inproc_collective> collectives_;
};

//! One rank's handle on a `basic_inproc_world` (or on a group split from it), moving
//! bytes with `Transport`. Models `communicator`.
template <class Transport>
class basic_inproc_communicator {
public:
  //! The transport's per-transfer state.
  using state_type = typename Transport::request_state;
  //! A send or receive in flight.
  using request = std::shared_ptr<state_type>;
  //! What stages run on (the calling thread, or a CUDA stream).
  using resource_type = typename Transport::resource_type;
  //! The world this communicator's ranks share.
  using world_type = basic_inproc_world<Transport>;

  //! Rank `rank` of the whole world, moving bytes with `transport`.
  basic_inproc_communicator(world_type& world, int rank, Transport transport = {})
      : world_(&world), transport_(std::move(transport)), id_(0), index_(rank) {
    if (rank < 0 || rank >= world.size())
      throw error("inproc communicator: rank " + std::to_string(rank) + " out of range for a world of " +
                  std::to_string(world.size()) + " ranks");
    members_.resize(static_cast<std::size_t>(world.size()));
    for (int r = 0; r < world.size(); ++r) members_[static_cast<std::size_t>(r)] = r;
  }

  //! This rank in the communicator.
  [[nodiscard]] int rank() const noexcept { return index_; }
  //! Ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(members_.size()); }
  //! Largest tag (any int).
  [[nodiscard]] int max_tag() const noexcept { return 0x7fffffff; }
  //! Where this rank's stages run.
  [[nodiscard]] resource_type resource() const noexcept { return transport_.resource(); }
  //! The rank's world.
  [[nodiscard]] world_type& world() const noexcept { return *world_; }
  //! The rank's transport.
  [[nodiscard]] Transport& transport() noexcept { return transport_; }

  //! Starts sending `data` to `peer`, after the work already issued on `resource`
  //! (copied when the receive is matched; keep it alive until the send finished).
  request send(int peer, int tag, std::span<const std::byte> data, resource_type resource) {
    return post(peer, tag, data.data(), nullptr, data.size(), true, resource);
  }
  //! `send` after the work on this rank's own resource.
  request send(int peer, int tag, std::span<const std::byte> data) { return send(peer, tag, data, resource()); }
  //! Starts receiving exactly `data.size()` bytes from `peer`, into memory that the
  //! work already issued on `resource` may still be using.
  request receive(int peer, int tag, std::span<std::byte> data, resource_type resource) {
    return post(peer, tag, nullptr, data.data(), data.size(), false, resource);
  }
  //! `receive` into memory this rank's own resource may still be using.
  request receive(int peer, int tag, std::span<std::byte> data) { return receive(peer, tag, data, resource()); }
  //! Whether the transfer finished.
  [[nodiscard]] bool test(request& r) {
    {
      std::lock_guard lock(world_->mutex_);
      if (!r->done.load()) return false;
    }
    return transport_.finished(*r);
  }
  //! Blocks until the transfer is matched, then orders `resource` after it (on the
  //! host: it has finished); throws on abort, watchdog or size mismatch.
  void wait(request& r, resource_type resource) {
    // A short spin first: a peer usually answers within microseconds, and a
    // blocking wait costs a futex round trip on both sides.
    for (int spin = 0; spin < 200 && !r->done.load(std::memory_order_acquire); ++spin) std::this_thread::yield();
    {
      std::unique_lock lock(world_->mutex_);
      world_->wait(lock, global(), [&] { return r->done.load(); }, r->waits_for);
    }
    if (!r->error.empty()) throw error(r->error);
    transport_.order_after(*r, resource);
  }
  //! `wait`, ordering this rank's own resource.
  void wait(request& r) { wait(r, resource()); }

  //! Sums `buffer` over all ranks in place, in member order (so deterministic);
  //! `resource` is ordered after the sum.
  //! Throws `dflop::error` when members pass buffers of different sizes or types.
  void all_reduce_sum(const gradient_buffer& buffer, resource_type resource) {
    if (size() == 1) return;
    auto arrival = transport_.arrive(buffer, resource);
    const auto reduced = collective(buffer, std::move(arrival), [&](detail::inproc_collective& state) {
      return transport_.reduce(state.parts, state.arrivals, buffer);
    });
    transport_.order_after_reduce(reduced, resource);
  }
  //! `all_reduce_sum`, ordering this rank's own resource.
  void all_reduce_sum(const gradient_buffer& buffer) { all_reduce_sum(buffer, resource()); }

  //! Starts `all_reduce_sum(buffer)` and returns at once; `wait` completes it. The
  //! last member to start (or join) it sums for everyone, in member order, while
  //! the others go on working: keep `buffer` untouched until the wait. Every
  //! member starts the same sums in the same order. Host memory only.
  request all_reduce_sum_start(const gradient_buffer& buffer, resource_type)
    requires std::same_as<Transport, host_transport>
  {
    return start_collective(buffer, "all_reduce_sum_start", "a started gradient all-reduce",
                            [&](detail::inproc_collective& all) { return transport_.reduce(all.parts, all.arrivals, buffer); });
  }
  //! `all_reduce_sum_start` on this rank's own resource.
  request all_reduce_sum_start(const gradient_buffer& buffer)
    requires std::same_as<Transport, host_transport>
  {
    return all_reduce_sum_start(buffer, resource());
  }

  //! The sum over all members of this member's shard of `buffer` and of the
  //! common remainder (`shard_of`), written there, in member order (the values an
  //! all-reduce gives); the rest of `buffer` is unspecified. Host memory only.
  //! Throws `dflop::error` when members pass buffers of different sizes or types.
  void reduce_scatter_sum(const gradient_buffer& buffer, resource_type)
    requires std::same_as<Transport, host_transport>
  {
    if (size() == 1) return;
    (void)collective(buffer, {}, [](detail::inproc_collective& state) {
      sum_shards_of(state);
      return std::shared_ptr<void>{};
    }, "reduce_scatter_sum", "a reduce-scatter");
  }
  //! Starts `reduce_scatter_sum(buffer)` and returns at once; `wait` completes
  //! it. As `all_reduce_sum_start`, the last member to start it sums every shard
  //! while the others go on working: keep `buffer` untouched until the wait.
  //! Host memory only; a size or type mismatch fails the wait.
  request reduce_scatter_sum_start(const gradient_buffer& buffer, resource_type)
    requires std::same_as<Transport, host_transport>
  {
    return start_collective(buffer, "reduce_scatter_sum_start", "a started gradient reduce-scatter",
                            [](detail::inproc_collective& all) {
                              sum_shards_of(all);
                              return std::shared_ptr<void>{};
                            });
  }

  //! Every member's shard of `buffer` (`shard_of`) copied to every member; the
  //! common remainder is left as it is. Host memory only. Throws `dflop::error`
  //! when members pass buffers of different sizes or types.
  void all_gather(const gradient_buffer& buffer, resource_type)
    requires std::same_as<Transport, host_transport>
  {
    if (size() == 1) return;
    (void)collective(buffer, {}, [&](detail::inproc_collective& state) {
      detail::gather_shards(state.parts, state.count, element_size(state.type));
      return std::shared_ptr<void>{};
    }, "all_gather", "an all-gather");
  }

  //! Sums one host value over all ranks (after the work issued on this rank's
  //! resource has finished: on a device, the step's one host wait).
  [[nodiscard]] double all_reduce_value(double value) {
    transport_.settle(resource(), world_->watchdog(), global());
    if (size() == 1) return value;
    (void)collective(gradient_buffer::of(std::span<double>(&value, 1)), {}, [](detail::inproc_collective& state) {
      detail::sum_into_every_part<double>(state.parts, 1);
      return std::shared_ptr<void>{};
    });
    return value;
  }

  //! MPI_Comm_split: ranks with the same `color` form a communicator, ordered by
  //! (key, rank); it shares this rank's transport.
  [[nodiscard]] basic_inproc_communicator split(int color, int key) {
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
    basic_inproc_communicator result(*this);
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

  //! Memory the transport moves (64-byte aligned host memory, or device memory).
  [[nodiscard]] std::byte* allocate(std::size_t bytes) { return transport_.allocate(bytes); }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t bytes) noexcept { transport_.deallocate(pointer, bytes); }

private:
  [[nodiscard]] int global() const noexcept { return members_[static_cast<std::size_t>(index_)]; }

  // One collective over this communicator: each member deposits `part` (and what
  // its transport recorded on arrival); the last to arrive runs `reduce` over all
  // of them while the others wait. Returns what `reduce` returned. Parts of
  // different sizes or types fail on every member (nothing is summed).
  template <class Reduce>
  std::shared_ptr<void> collective(const gradient_buffer& part, std::shared_ptr<void> arrival, Reduce&& reduce,
                                   const char* name = "all_reduce_sum", const char* waiting_for = "an all-reduce") {
    std::unique_lock lock(world_->mutex_);
    const auto at = std::pair{id_, sequence_++};
    auto& state = world_->collectives_[at];
    deposit(state, part, std::move(arrival), name);
    if (++state.arrived == size()) {
      complete(state, reduce);
    } else {
      world_->wait(lock, global(), [&] { return state.done; }, waiting_for);
    }
    auto reduced = state.reduced;
    const std::string failed = state.error;
    if (++state.departed == size()) world_->collectives_.erase(at);
    if (!failed.empty()) throw error(failed);
    return reduced;
  }

  // Deposits this member's part of a collective and returns at once; the last
  // member to arrive runs `reduce` for all (`complete`), which finishes every
  // member's request. Host memory only.
  template <class Reduce>
  request start_collective(const gradient_buffer& part, const char* name, const char* waits_for, Reduce&& reduce) {
    auto started = std::make_shared<state_type>();
    started->waits_for = waits_for;
    if (size() == 1) {
      started->done.store(true);
      return started;
    }
    std::lock_guard lock(world_->mutex_);
    if (world_->aborted_) throw pipeline_aborted("rank " + std::to_string(global()) + " stopped: " + world_->failure_text_);
    const auto at = std::pair{id_, sequence_++};
    auto& state = world_->collectives_[at];
    deposit(state, part, {}, name);
    state.started.push_back(started);
    ++state.departed;  // it takes nothing back: the result is written into its buffer
    if (++state.arrived == size()) complete(state, reduce);
    if (state.departed == size()) world_->collectives_.erase(at);
    return started;
  }

  // Each member's shard and the common remainder of the deposited parts become their sum.
  static void sum_shards_of(detail::inproc_collective& state) {
    if (state.type == element_type::float64) detail::sum_shards<double>(state.parts, state.count);
    else detail::sum_shards<float>(state.parts, state.count);
  }

  // This member's part of an all-reduce (the world's lock held); parts of
  // different sizes or types record why, and nothing is summed.
  void deposit(detail::inproc_collective& state, const gradient_buffer& part, std::shared_ptr<void> arrival,
               const char* name = "all_reduce_sum") {
    if (state.parts.empty()) {
      state.parts.resize(members_.size());
      state.arrivals.resize(members_.size());
      state.count = part.count;
      state.type = part.type;
    } else if (state.error.empty() && (part.count != state.count || part.type != state.type)) {
      state.error = std::string(name) + ": rank " + std::to_string(global()) + " passed " + std::to_string(part.count) +
                    (part.type == element_type::float64 ? " doubles" : " floats") + ", another member " +
                    std::to_string(state.count) + (state.type == element_type::float64 ? " doubles" : " floats");
    }
    state.parts[static_cast<std::size_t>(index_)] = part.data;
    state.arrivals[static_cast<std::size_t>(index_)] = std::move(arrival);
  }

  // The last member to arrive: sums (unless the parts disagree), then completes
  // the started requests and wakes every member.
  template <class Reduce>
  void complete(detail::inproc_collective& state, Reduce&& reduce) {
    if (state.error.empty()) state.reduced = reduce(state);
    state.done = true;
    for (auto& started : state.started) {
      started->error = state.error;
      started->done.store(true, std::memory_order_release);
    }
    for (int member : members_) world_->wake(member);
  }

  request post(int peer, int tag, const std::byte* send_data, std::byte* receive_data, std::size_t bytes,
               bool is_send, resource_type resource) {
    if (peer < 0 || peer >= size())
      throw error("inproc communicator: peer " + std::to_string(peer) + " out of range for a communicator of " +
                  std::to_string(size()) + " ranks");
    auto state = std::make_shared<state_type>();
    transport_.mark(*state, resource);
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
    auto match = std::move(other.front());
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
    } else if (is_send) {
      transport_.copy(send_data, match.receive_data, bytes, *state, *match.state);
    } else {
      transport_.copy(match.send_data, receive_data, bytes, *match.state, *state);
    }
    state->done.store(true, std::memory_order_release);
    match.state->done.store(true, std::memory_order_release);
    world_->wake(match.owner);
    return state;
  }

  world_type* world_;
  Transport transport_;
  int id_;
  std::vector<int> members_;  // world ranks, by rank in this communicator
  int index_;
  std::uint64_t sequence_ = 0;  // collectives issued on this communicator
};

//! The world of threads that `inproc_communicator`s share.
using inproc_world = basic_inproc_world<host_transport>;
//! Ranks as threads of one process, host memory. Models `communicator`.
using inproc_communicator = basic_inproc_communicator<host_transport>;
static_assert(communicator<inproc_communicator>);
static_assert(shards_gradients<inproc_communicator>);

//! Runs `body(basic_inproc_communicator<Transport>&)` on `ranks` threads, one per
//! rank, each with the transport `make_transport(rank)` returns (called on its
//! thread), and waits for all. When any rank throws, every other rank is stopped
//! (its waits throw) and the first original exception is rethrown here. A stage
//! that never returns cannot be cancelled in-process: the other ranks stop after
//! the watchdog, the join waits for it.
template <class Transport, class MakeTransport, class Body>
void run_inproc_with(int ranks, MakeTransport&& make_transport, Body&& body,
                     double watchdog_seconds = default_watchdog_seconds) {
  basic_inproc_world<Transport> world(ranks, watchdog_seconds);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&world, &body, &make_transport, rank] {
      try {
        basic_inproc_communicator<Transport> comm(world, rank, make_transport(rank));
        body(comm);
      } catch (...) {
        world.abort(std::current_exception());
      }
    });
  for (auto& thread : threads) thread.join();
  if (auto failure = world.failure()) std::rethrow_exception(failure);
}

//! Runs `body(inproc_communicator&)` on `ranks` threads (host memory); see `run_inproc_with`.
template <class Body>
void run_inproc(int ranks, Body&& body, double watchdog_seconds = default_watchdog_seconds) {
  run_inproc_with<host_transport>(
      ranks, [](int) { return host_transport{}; }, std::forward<Body>(body), watchdog_seconds);
}

}  // namespace dflop
