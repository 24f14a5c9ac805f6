// SPDX-License-Identifier: Apache-2.0
//! \file
//! The MPI communicator model: one process per rank, host memory, nonblocking
//! point-to-point and all-reduce polled against the watchdog. Its fault path ends
//! the whole job (`MPI_Abort`) after printing the original error: the one place a
//! dflop library path ends the process, because a peer blocked inside MPI cannot
//! be woken any other way. The only dflop header that includes <mpi.h>; link MPI::MPI_CXX.
#pragma once

#include <dflop/error.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/gradient_shard.hpp>
#include <dflop/exec/stage.hpp>

// The C API only: Open MPI's deprecated C++ bindings warn under clang.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>

namespace dflop {

namespace detail {
inline void mpi_check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  std::string message(call);
  message.append(" failed: ").append(text, static_cast<std::size_t>(length));
  throw error(message);
}
}  // namespace detail

//! One MPI process's handle on a communicator (MPI_COMM_WORLD by default). Models
//! `communicator`. Move-only; owns (and frees) the communicators `split` makes.
class mpi_communicator {
public:
  //! A send or receive in flight (receives know the size they expect).
  struct request {
    MPI_Request handle = MPI_REQUEST_NULL;  //!< the MPI request
    std::size_t bytes = 0;                  //!< expected size of a receive
    bool is_receive = false;                //!< whether it is a receive
    bool done = false;                      //!< completed and checked
    const char* waits_for = "a message";    //!< what a wait on it waits for, as a watchdog timeout names it
    //! A started reduce-scatter's second part: the common remainder's all-reduce.
    MPI_Request remainder = MPI_REQUEST_NULL;
    //! A started reduce-scatter's shard, moved from `shard_from` to `shard_to` on completion.
    std::byte* shard_to = nullptr;
    const std::byte* shard_from = nullptr;  //!< where the in-place reduce-scatter left the shard
    std::size_t shard_bytes = 0;            //!< the shard's size
  };
  //! Host stages run on the calling thread.
  using resource_type = host_thread;

  //! Wraps `comm` (not owned). MPI must be initialized.
  explicit mpi_communicator(MPI_Comm comm = MPI_COMM_WORLD, double watchdog_seconds = default_watchdog_seconds)
      : comm_(comm), watchdog_(watchdog_seconds) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    world_rank_ = world_rank;
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
    max_tag_ = found ? *static_cast<int*>(value) : 32767;
  }
  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  //! Takes over `other`'s communicator.
  mpi_communicator(mpi_communicator&& other) noexcept { swap(other); }
  //! Takes over `other`'s communicator.
  mpi_communicator& operator=(mpi_communicator&& other) noexcept {
    swap(other);
    return *this;
  }
  ~mpi_communicator() {
    if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  //! This rank in the communicator.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! Ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return size_; }
  //! MPI_TAG_UB.
  [[nodiscard]] int max_tag() const noexcept { return max_tag_; }
  //! The calling thread.
  [[nodiscard]] host_thread resource() const noexcept { return {}; }
  //! The wrapped MPI communicator.
  [[nodiscard]] MPI_Comm native() const noexcept { return comm_; }

  //! MPI_Isend of `data` (keep it alive until the request completes).
  request send(int peer, int tag, std::span<const std::byte> data, host_thread = {}) {
    request r;
    detail::mpi_check(MPI_Isend(data.data(), count_of(data.size()), MPI_BYTE, peer, tag, comm_, &r.handle), "MPI_Isend");
    return r;
  }
  //! MPI_Irecv of exactly `data.size()` bytes; a different size fails the wait.
  request receive(int peer, int tag, std::span<std::byte> data, host_thread = {}) {
    request r;
    r.bytes = data.size();
    r.is_receive = true;
    detail::mpi_check(MPI_Irecv(data.data(), count_of(data.size()), MPI_BYTE, peer, tag, comm_, &r.handle),
                      "MPI_Irecv");
    return r;
  }
  //! Whether the transfer finished (checks a receive's size).
  [[nodiscard]] bool test(request& r) {
    if (r.done) return true;
    int flag = 0;
    MPI_Status status;
    if (r.remainder != MPI_REQUEST_NULL) {  // a started reduce-scatter: both parts, then the shard's move
      detail::mpi_check(MPI_Test(&r.remainder, &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (!flag) return false;
    }
    detail::mpi_check(MPI_Test(&r.handle, &flag, &status), "MPI_Test");
    if (!flag) return false;
    r.done = true;
    if (r.shard_to != nullptr) std::memcpy(r.shard_to, r.shard_from, r.shard_bytes);  // [0, q) and the shard are apart
    if (r.is_receive) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (static_cast<std::size_t>(count) != r.bytes)
        throw error("rank " + std::to_string(world_rank_) + ": message size mismatch from rank " +
                    std::to_string(status.MPI_SOURCE) + " tag " + std::to_string(status.MPI_TAG) + ": got " +
                    std::to_string(count) + " bytes, expected " + std::to_string(r.bytes));
    }
    return true;
  }
  //! Polls until the transfer finished; throws `watchdog_timeout` after the watchdog.
  void wait(request& r, host_thread = {}) {
    poll([&] { return test(r); }, r.waits_for);
  }

  //! In-place sum over the communicator (MPI_Iallreduce, polled against the watchdog).
  void all_reduce_sum(const gradient_buffer& buffer, host_thread = {}) {
    if (size_ == 1 || buffer.count == 0) return;
    const MPI_Datatype type = mpi_type(buffer);
    const std::size_t chunk = std::size_t{1} << 30;
    for (std::size_t first = 0; first < buffer.count; first += chunk) {
      const std::size_t count = std::min(chunk, buffer.count - first);
      void* data = static_cast<std::byte*>(buffer.data) + first * element_size(buffer.type);
      MPI_Request handle = MPI_REQUEST_NULL;
      detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), type, MPI_SUM, comm_, &handle),
                        "MPI_Iallreduce");
      poll_request(handle, "an all-reduce");
    }
  }
  //! Starts the in-place sum of `buffer` (MPI_Iallreduce) and returns at once;
  //! `wait` completes it. Keep `buffer` untouched until then; every member starts
  //! the same sums in the same order. MPI progresses it inside MPI calls (the
  //! executor tests its messages between ops). Throws `dflop::error` for more
  //! than 2^30 elements: start such a buffer in parts.
  request all_reduce_sum_start(const gradient_buffer& buffer, host_thread = {}) {
    request r;
    r.waits_for = "a started gradient all-reduce";
    if (size_ == 1 || buffer.count == 0) {
      r.done = true;
      return r;
    }
    if (buffer.count > (std::size_t{1} << 30))
      throw error("all_reduce_sum_start: " + std::to_string(buffer.count) +
                  " elements in one buffer; start at most 2^30 at a time");
    const MPI_Datatype type = buffer.type == element_type::float64 ? MPI_DOUBLE : MPI_FLOAT;
    detail::mpi_check(
        MPI_Iallreduce(MPI_IN_PLACE, buffer.data, static_cast<int>(buffer.count), type, MPI_SUM, comm_, &r.handle),
        "MPI_Iallreduce");
    return r;
  }
  //! This member's shard of `buffer` and the common remainder (`shard_of`) become
  //! the sum over the members (MPI_Ireduce_scatter_block in place, then the shard
  //! moved to its offset; the remainder all-reduced), polled against the
  //! watchdog; the rest of `buffer` is unspecified. Throws `dflop::error` for a
  //! shard of more than 2^30 elements: split such a buffer.
  void reduce_scatter_sum(const gradient_buffer& buffer, host_thread = {}) {
    request r = reduce_scatter_sum_start(buffer);
    r.waits_for = "a reduce-scatter";
    wait(r);
  }
  //! Starts `reduce_scatter_sum(buffer)` (MPI_Ireduce_scatter_block in place and
  //! the remainder's MPI_Iallreduce) and returns at once; `wait` completes it and
  //! moves the shard to its offset. Keep `buffer` untouched until then; every
  //! member starts the same ones in the same order. Throws `dflop::error` for a
  //! shard of more than 2^30 elements.
  request reduce_scatter_sum_start(const gradient_buffer& buffer, host_thread = {}) {
    request r;
    r.waits_for = "a started gradient reduce-scatter";
    if (size_ == 1 || buffer.count == 0) {
      r.done = true;
      return r;
    }
    const gradient_shard shard = shard_of(buffer.count, size_, rank_);
    const std::size_t q = checked_shard(shard, "reduce_scatter_sum_start");
    const gradient_buffer remainder = remainder_of(buffer, shard);  // fewer elements than members
    auto* data = static_cast<std::byte*>(buffer.data);
    if (q > 0) {
      detail::mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, data, static_cast<int>(q), mpi_type(buffer), MPI_SUM,
                                                  comm_, &r.handle),
                        "MPI_Ireduce_scatter_block");
      const std::size_t bytes = element_size(buffer.type);
      if (shard.begin > 0) {  // in place, the member's sum lands at the buffer's start
        r.shard_to = data + shard.begin * bytes;
        r.shard_from = data;
        r.shard_bytes = q * bytes;
      }
    }
    if (remainder.count > 0) {
      MPI_Request& target = r.handle == MPI_REQUEST_NULL ? r.handle : r.remainder;
      detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, remainder.data, static_cast<int>(remainder.count),
                                       mpi_type(buffer), MPI_SUM, comm_, &target),
                        "MPI_Iallreduce");
    }
    return r;
  }
  //! Every member's shard of `buffer` (`shard_of`) copied to every member
  //! (MPI_Iallgather in place), polled against the watchdog; the remainder is
  //! left as it is. Throws `dflop::error` for a shard of more than 2^30 elements.
  void all_gather(const gradient_buffer& buffer, host_thread = {}) {
    if (size_ == 1 || buffer.count == 0) return;
    const gradient_shard shard = shard_of(buffer.count, size_, rank_);
    const std::size_t q = checked_shard(shard, "all_gather");
    if (q == 0) return;
    MPI_Request handle = MPI_REQUEST_NULL;
    detail::mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.data, static_cast<int>(q),
                                     mpi_type(buffer), comm_, &handle),
                      "MPI_Iallgather");
    poll_request(handle, "an all-gather");
  }

  //! Sums one value over the communicator.
  [[nodiscard]] double all_reduce_value(double value) {
    all_reduce_sum(gradient_buffer::of(std::span<double>(&value, 1)));
    return value;
  }

  //! MPI_Comm_split; the result owns the new communicator.
  [[nodiscard]] mpi_communicator split(int color, int key) {
    MPI_Comm comm = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split(comm_, color, key, &comm), "MPI_Comm_split");
    mpi_communicator result(comm, watchdog_);
    result.owned_ = true;
    return result;
  }

  //! Prints the failure ("dflop: rank R: ...") and ends the whole job with MPI_Abort(1).
  void abort(std::exception_ptr failure) noexcept {
    std::string text = describe_failure(world_rank_, failure);
    text.append("\n");
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  //! Changes the watchdog for later waits.
  void set_watchdog(double seconds) noexcept { watchdog_ = seconds; }

  //! 64-byte aligned host memory.
  [[nodiscard]] std::byte* allocate(std::size_t bytes) {
    return static_cast<std::byte*>(::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{64}));
  }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t) noexcept { ::operator delete(pointer, std::align_val_t{64}); }

private:
  static MPI_Datatype mpi_type(const gradient_buffer& buffer) noexcept {
    return buffer.type == element_type::float64 ? MPI_DOUBLE : MPI_FLOAT;
  }
  // A shard's element count, at most what one MPI call takes.
  static std::size_t checked_shard(const gradient_shard& shard, const char* what) {
    const std::size_t q = shard.end - shard.begin;
    if (q > (std::size_t{1} << 30))
      throw error(std::string(what) + ": shards of " + std::to_string(q) +
                  " elements; split the buffer so each shard has at most 2^30");
    return q;
  }
  // The common remainder of `buffer` (elements every member holds).
  static gradient_buffer remainder_of(const gradient_buffer& buffer, const gradient_shard& shard) noexcept {
    return {static_cast<std::byte*>(buffer.data) + shard.common_begin * element_size(buffer.type),
            shard.count - shard.common_begin, buffer.type};
  }
  // Polls `handle` until it completes (against the watchdog).
  void poll_request(MPI_Request& handle, const char* waiting_for) {
    poll(
        [&] {
          int flag = 0;
          detail::mpi_check(MPI_Test(&handle, &flag, MPI_STATUS_IGNORE), "MPI_Test");
          return flag != 0;
        },
        waiting_for);
  }
  static int count_of(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX)) throw error("mpi_communicator: message over 2 GiB");
    return static_cast<int>(bytes);
  }

  // Polls `done()`: busy at first, then yielding the core for up to 2 ms (most
  // messages arrive within that, and a sleep costs a whole timer tick on some
  // machines: 0.05-0.3 ms per call, measured), then short sleeps, so ranks that
  // share cores leave them to the others during long waits.
  template <class Done>
  void poll(Done done, const char* what) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    constexpr double yielding_seconds = 2e-3;
    double waited = 0;
    for (unsigned spin = 0;; ++spin) {
      if (done()) return;
      if (spin < 64) continue;
      if ((spin & 15U) == 0) waited = std::chrono::duration<double>(clock::now() - start).count();
      if (waited < yielding_seconds) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (waited > watchdog_) {
        std::string text("rank ");
        text.append(std::to_string(world_rank_)).append(": watchdog: no progress for ");
        text.append(std::to_string(watchdog_)).append(" s waiting for ").append(what);
        throw watchdog_timeout(text);
      }
    }
  }

  void swap(mpi_communicator& other) noexcept {
    std::swap(comm_, other.comm_);
    std::swap(owned_, other.owned_);
    std::swap(rank_, other.rank_);
    std::swap(size_, other.size_);
    std::swap(world_rank_, other.world_rank_);
    std::swap(max_tag_, other.max_tag_);
    std::swap(watchdog_, other.watchdog_);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
  int max_tag_ = 32767;
  double watchdog_ = default_watchdog_seconds;
};
static_assert(communicator<mpi_communicator>);
static_assert(shards_gradients<mpi_communicator>);

}  // namespace dflop
