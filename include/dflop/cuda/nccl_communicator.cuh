// SPDX-License-Identifier: Apache-2.0
//! \file
//! The NCCL communicator model: CUDA memory, `ncclSend` / `ncclRecv` in their own
//! group calls on dedicated send and receive streams, CUDA events between the
//! stages' compute stream and those streams. A wait orders the compute stream
//! after the transfer (`cudaStreamWaitEvent`): the host never blocks in the steady
//! state. Messages between two ranks match in posting order (NCCL has no tags), so
//! the executor posts receives in their senders' order. The host waits once per
//! step, for the loss, polling an event against the watchdog; a fault calls
//! `ncclCommAbort` and then the abort handler (the MPI bootstrap installs MPI_Abort).
//! A gradient sum a stage starts early (`all_reduce_sum_start`) runs on a reduction
//! stream of its own, after the gradients' kernels, under the compute queued later
//! (as DDP and Megatron-LM overlap it); the step's end orders the compute stream after it.
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>
#include <dflop/cuda/event.cuh>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/gradient_shard.hpp>

#include <nccl.h>

#include <climits>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace dflop {

namespace detail {
inline void nccl_check(ncclResult_t status, const char* call, ncclComm_t comm) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* detail_text = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  throw_nccl_error(status, call, __FILE__, __LINE__, detail_text);
}
}  // namespace detail

//! One rank's NCCL communicator plus its streams. Models `communicator`.
//! Move-only; owns its `ncclComm_t` (destroyed, or aborted after a fault) and streams.
class nccl_communicator {
public:
  //! A transfer in flight: an event recorded after it on its stream.
  struct request {
    detail::shared_cuda_event event;  //!< completes with the transfer
  };
  //! Stages run on a CUDA stream.
  using resource_type = cudaStream_t;
  //! NCCL matches point-to-point messages in posting order, not by tag.
  static constexpr bool matches_in_order = true;

  //! Takes ownership of `comm`; stages run on `compute` (not owned). The current
  //! device must be the communicator's.
  nccl_communicator(ncclComm_t comm, cudaStream_t compute, double watchdog_seconds = default_watchdog_seconds)
      : comm_(comm), compute_(compute), watchdog_(watchdog_seconds) {
    detail::nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
    detail::nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
    DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
    DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&receive_stream_, cudaStreamNonBlocking));
    DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&reduce_stream_, cudaStreamNonBlocking));
    DFLOP_CUDA_TRY(cudaMallocHost(&host_value_, sizeof(double)));
    DFLOP_CUDA_TRY(cudaMalloc(&device_value_, sizeof(double)));
    value_ready_ = detail::make_event();
  }
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  //! Takes over `other`'s communicator and streams.
  nccl_communicator(nccl_communicator&& other) noexcept { swap(other); }
  //! Takes over `other`'s communicator and streams.
  nccl_communicator& operator=(nccl_communicator&& other) noexcept {
    swap(other);
    return *this;
  }
  ~nccl_communicator() {
    if (comm_ == nullptr) return;
    if (aborted_) (void)ncclCommAbort(comm_);
    else (void)ncclCommDestroy(comm_);
    (void)cudaStreamDestroy(send_stream_);
    (void)cudaStreamDestroy(receive_stream_);
    (void)cudaStreamDestroy(reduce_stream_);
    (void)cudaFreeHost(host_value_);
    (void)cudaFree(device_value_);
  }

  //! This rank in the communicator.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! Ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return size_; }
  //! Tags are not used (messages match in order).
  [[nodiscard]] int max_tag() const noexcept { return INT_MAX; }
  //! The stages' compute stream.
  [[nodiscard]] cudaStream_t resource() const noexcept { return compute_; }
  //! The NCCL communicator.
  [[nodiscard]] ncclComm_t native() const noexcept { return comm_; }

  //! Sends `data` (device memory) to `peer` after the work already on `stream`.
  request send(int peer, int, std::span<const std::byte> data, cudaStream_t stream) {
    const auto produced = detail::record_event(stream);
    DFLOP_CUDA_TRY(cudaStreamWaitEvent(send_stream_, produced.get(), 0));
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart", comm_);
    detail::nccl_check(ncclSend(data.data(), data.size(), ncclChar, peer, comm_, send_stream_), "ncclSend", comm_);
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm_);
    return {detail::record_event(send_stream_)};
  }
  //! Receives `data.size()` bytes (device memory) from `peer` on the receive stream,
  //! after the work already issued on `stream`: a pooled buffer the executor reuses
  //! may still be read by kernels queued there.
  request receive(int peer, int, std::span<std::byte> data, cudaStream_t stream) {
    const auto free_to_overwrite = detail::record_event(stream);
    DFLOP_CUDA_TRY(cudaStreamWaitEvent(receive_stream_, free_to_overwrite.get(), 0));
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart", comm_);
    detail::nccl_check(ncclRecv(data.data(), data.size(), ncclChar, peer, comm_, receive_stream_), "ncclRecv", comm_);
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm_);
    return {detail::record_event(receive_stream_)};
  }
  //! Whether the transfer finished (an event query; never blocks).
  [[nodiscard]] bool test(request& r) { return detail::event_done(r.event.get()); }
  //! Orders `stream` after the transfer (no host wait).
  void wait(request& r, cudaStream_t stream) { DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, r.event.get(), 0)); }

  //! In-place ncclAllReduce (sum) on `stream`.
  void all_reduce_sum(const gradient_buffer& buffer, cudaStream_t stream) {
    if (size_ == 1 || buffer.count == 0) return;
    detail::nccl_check(ncclAllReduce(buffer.data, buffer.data, buffer.count, nccl_type(buffer), ncclSum, comm_, stream),
                       "ncclAllReduce", comm_);
  }
  //! This member's shard of `buffer` and the common remainder (`shard_of`) become
  //! the sum over the members (ncclReduceScatter in place, the remainder
  //! ncclAllReduce'd), on `stream`; the rest of `buffer` is unspecified.
  void reduce_scatter_sum(const gradient_buffer& buffer, cudaStream_t stream) {
    if (size_ == 1 || buffer.count == 0) return;
    const gradient_shard shard = shard_of(buffer.count, size_, rank_);
    const std::size_t bytes = element_size(buffer.type);
    auto* data = static_cast<std::byte*>(buffer.data);
    if (shard.end > shard.begin)
      detail::nccl_check(ncclReduceScatter(data, data + shard.begin * bytes, shard.end - shard.begin, nccl_type(buffer),
                                           ncclSum, comm_, stream),
                         "ncclReduceScatter", comm_);
    all_reduce_sum({data + shard.common_begin * bytes, shard.count - shard.common_begin, buffer.type}, stream);
  }
  //! Every member's shard of `buffer` (`shard_of`) copied to every member
  //! (ncclAllGather in place) on `stream`; the remainder is left as it is.
  void all_gather(const gradient_buffer& buffer, cudaStream_t stream) {
    if (size_ == 1 || buffer.count == 0) return;
    const gradient_shard shard = shard_of(buffer.count, size_, rank_);
    if (shard.end == shard.begin) return;
    auto* data = static_cast<std::byte*>(buffer.data);
    detail::nccl_check(ncclAllGather(data + shard.begin * element_size(buffer.type), data, shard.end - shard.begin,
                                     nccl_type(buffer), comm_, stream),
                       "ncclAllGather", comm_);
  }
  //! Starts the in-place sum of `buffer` on the reduction stream, after the work
  //! already on `stream` (the kernels that wrote the gradients), and returns at
  //! once: the sum runs under the compute queued on `stream` afterwards. `wait`
  //! orders a stream after it; every rank must start the same sums in the same order.
  request all_reduce_sum_start(const gradient_buffer& buffer, cudaStream_t stream) {
    return start_on_reduce_stream(buffer, stream, [&] { all_reduce_sum(buffer, reduce_stream_); });
  }
  //! Starts `reduce_scatter_sum(buffer)` on the reduction stream, after the work
  //! already on `stream`, and returns at once, as `all_reduce_sum_start` does.
  request reduce_scatter_sum_start(const gradient_buffer& buffer, cudaStream_t stream) {
    return start_on_reduce_stream(buffer, stream, [&] { reduce_scatter_sum(buffer, reduce_stream_); });
  }
  //! Sums one host value over the communicator: the step's one host wait, polled
  //! against the watchdog and NCCL's asynchronous error.
  [[nodiscard]] double all_reduce_value(double value) {
    *host_value_ = value;
    DFLOP_CUDA_TRY(cudaMemcpyAsync(device_value_, host_value_, sizeof(double), cudaMemcpyHostToDevice, compute_));
    if (size_ > 1)
      detail::nccl_check(ncclAllReduce(device_value_, device_value_, 1, ncclFloat64, ncclSum, comm_, compute_),
                         "ncclAllReduce", comm_);
    DFLOP_CUDA_TRY(cudaMemcpyAsync(host_value_, device_value_, sizeof(double), cudaMemcpyDeviceToHost, compute_));
    DFLOP_CUDA_TRY(cudaEventRecord(value_ready_.get(), compute_));
    request r{value_ready_};
    poll(r);
    return *host_value_;
  }

  //! ncclCommSplit; the result shares the compute stream and has its own comm streams.
  [[nodiscard]] nccl_communicator split(int color, int key) {
    ncclComm_t comm = nullptr;
    detail::nccl_check(ncclCommSplit(comm_, color, key, &comm, nullptr), "ncclCommSplit", comm_);
    nccl_communicator result(comm, compute_, watchdog_);
    result.on_abort_ = on_abort_;
    return result;
  }

  //! Prints the failure, aborts the NCCL communicator (unblocking its kernels) and
  //! calls the abort handler (for example MPI_Abort, set by the MPI bootstrap).
  void abort(std::exception_ptr failure) noexcept {
    const std::string text = describe_failure(rank_, failure);
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    if (!aborted_ && comm_ != nullptr) (void)ncclCommAbort(comm_);
    aborted_ = true;
    if (on_abort_) on_abort_(text);
  }
  //! What `abort` does after ncclCommAbort (for example end the MPI job).
  void set_abort_handler(std::function<void(const std::string&)> handler) { on_abort_ = std::move(handler); }
  //! Changes the watchdog for later host waits.
  void set_watchdog(double seconds) noexcept { watchdog_ = seconds; }

  //! Device memory (cudaMalloc: pooled by the executor, so only in the first steps).
  [[nodiscard]] std::byte* allocate(std::size_t bytes) {
    void* pointer = nullptr;
    DFLOP_CUDA_TRY(cudaMalloc(&pointer, bytes));
    return static_cast<std::byte*>(pointer);
  }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t) noexcept { (void)cudaFree(pointer); }

private:
  // Runs `enqueue` (collectives on the reduction stream) after the work already
  // on `stream`; the request completes with them.
  template <class Enqueue>
  request start_on_reduce_stream(const gradient_buffer& buffer, cudaStream_t stream, Enqueue&& enqueue) {
    const auto produced = detail::record_event(stream);
    if (size_ == 1 || buffer.count == 0) return {produced};
    DFLOP_CUDA_TRY(cudaStreamWaitEvent(reduce_stream_, produced.get(), 0));
    enqueue();
    return {detail::record_event(reduce_stream_)};
  }

  static ncclDataType_t nccl_type(const gradient_buffer& buffer) noexcept {
    return buffer.type == element_type::float64 ? ncclFloat64 : ncclFloat32;
  }
  void poll(request& r) {
    detail::wait_for_event(r.event.get(), watchdog_, rank_, "the step", [&] {
      ncclResult_t async = ncclSuccess;
      detail::nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
      detail::nccl_check(async, "NCCL asynchronous error", comm_);
    });
  }

  void swap(nccl_communicator& other) noexcept {
    std::swap(comm_, other.comm_);
    std::swap(compute_, other.compute_);
    std::swap(send_stream_, other.send_stream_);
    std::swap(receive_stream_, other.receive_stream_);
    std::swap(reduce_stream_, other.reduce_stream_);
    std::swap(host_value_, other.host_value_);
    std::swap(device_value_, other.device_value_);
    std::swap(value_ready_, other.value_ready_);
    std::swap(rank_, other.rank_);
    std::swap(size_, other.size_);
    std::swap(watchdog_, other.watchdog_);
    std::swap(aborted_, other.aborted_);
    std::swap(on_abort_, other.on_abort_);
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_ = nullptr;
  cudaStream_t send_stream_ = nullptr;
  cudaStream_t receive_stream_ = nullptr;
  cudaStream_t reduce_stream_ = nullptr;
  double* host_value_ = nullptr;
  double* device_value_ = nullptr;
  detail::shared_cuda_event value_ready_;
  int rank_ = 0;
  int size_ = 1;
  double watchdog_ = default_watchdog_seconds;
  bool aborted_ = false;
  std::function<void(const std::string&)> on_abort_;
};
static_assert(communicator<nccl_communicator>);
static_assert(starts_all_reduce<nccl_communicator>);
static_assert(shards_gradients<nccl_communicator>);

}  // namespace dflop
