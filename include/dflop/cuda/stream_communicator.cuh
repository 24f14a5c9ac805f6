// SPDX-License-Identifier: Apache-2.0
//! \file
//! A pipeline on one GPU: ranks are host threads of one process, each with its own
//! compute stream, and messages are device-to-device copies between those streams.
//! `stream_communicator` is the in-process communicator (matching by tag, splits,
//! member-order sums, abort and watchdog; inproc_communicator.hpp) over
//! `stream_transport`, which moves device memory:
//! - a send or receive records an event on the poster's stream when posted: the
//!   data is ready (send) or the buffer is free to overwrite (receive) once the
//!   work issued before it is done;
//! - the rank whose post completes the match issues the copy on its copy stream,
//!   after both events, and records a third that both requests share;
//! - `wait` blocks the host only until the message is matched, then orders the
//!   stream after the copy (`cudaStreamWaitEvent`): kernels queue ahead freely;
//! - a data-parallel sum waits for every member's stream, adds the members'
//!   buffers in member order on the last arriver's copy stream (Thrust) and copies
//!   the sum back to each; every member's stream waits for that.
//! The step's loss reduction (`all_reduce_value`) first waits, against the
//! watchdog, for the rank's stream: the one place the host synchronizes.
//!
//! What stages must do: touch the executor's buffers (inputs, outputs, stashes,
//! scratch) only in work ordered on `ctx.resource`; a side stream (an own cuBLAS
//! handle's, say) must wait for an event on `ctx.resource` first and be waited for
//! before the call returns. Zero gradients with `cudaMemsetAsync` on the compute
//! stream, or synchronize after `cudaMemset` (the legacy stream does not order the
//! non-blocking streams). All ranks of a world use one device.
//!
//! Limits: each rank has one copy stream, so the copies a rank matches run in the
//! order they were matched (a copy that waits for a slow producer delays those
//! behind it). After the watchdog fires on a device that is hung, freeing the
//! executor's device memory (cudaFree) waits for the device: the thread does not
//! return until the hung kernel does.
//!
//! Use it to run and check a multi-stage pipeline of CUDA stage functors without
//! NCCL or several GPUs (NCCL refuses two ranks on one device), or to overlap
//! stages of a small model on one large GPU.
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>
#include <dflop/cuda/event.cuh>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/host_transport.hpp>
#include <dflop/exec/inproc_communicator.hpp>

#include <thrust/execution_policy.h>
#include <thrust/transform.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace dflop {

namespace detail {
//! A stream transfer's state: the poster's mark and the copy's completion.
struct stream_request_state : inproc_request_state {
  shared_cuda_event mark;    //!< recorded on the poster's stream when posted
  shared_cuda_event copied;  //!< completes with the copy (none for an empty message)
};

//! The streams of one rank: compute (the stages') and copy (messages it matches, sums it runs).
struct rank_streams {
  rank_streams(int device_index, cudaStream_t user_compute) : device(device_index), owns_compute(user_compute == nullptr) {
    DFLOP_CUDA_TRY(cudaSetDevice(device));
    if (owns_compute) DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    else compute = user_compute;
    DFLOP_CUDA_TRY(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  }
  rank_streams(const rank_streams&) = delete;
  rank_streams& operator=(const rank_streams&) = delete;
  ~rank_streams() {
    // Destroying a stream with queued work is safe: CUDA releases it once the work is done.
    (void)cudaStreamDestroy(copy);
    if (owns_compute) (void)cudaStreamDestroy(compute);
  }
  int device;
  bool owns_compute;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
};

//! Element-wise sum functor for Thrust (host and device).
struct add_elements {
  template <class T>
  __host__ __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

//! parts[0] += parts[k] for k = 1.. in member order, then parts[k] = parts[0], all on `stream`.
template <class T>
void sum_into_every_part_on(cudaStream_t stream, std::span<void* const> parts, std::size_t count) {
  T* sum = static_cast<T*>(parts[0]);
  for (std::size_t k = 1; k < parts.size(); ++k) {
    const T* values = static_cast<const T*>(parts[k]);
    // Thrust reports a failed launch as thrust::system_error.
    thrust::transform(thrust::cuda::par_nosync.on(stream), sum, sum + count, values, sum, add_elements{});
  }
  for (std::size_t k = 1; k < parts.size(); ++k)
    DFLOP_CUDA_TRY(cudaMemcpyAsync(parts[k], sum, count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}
}  // namespace detail

//! The device transport of `stream_communicator` (see the file comment and
//! host_transport.hpp for the members). Copies share the rank's streams.
class stream_transport {
public:
  //! Stages run on a CUDA stream.
  using resource_type = cudaStream_t;
  //! Each transfer keeps its events.
  using request_state = detail::stream_request_state;

  //! Makes `device` current on this thread; the stages run on `compute` (not owned),
  //! or on a stream of the transport's own when it is null.
  explicit stream_transport(int device = 0, cudaStream_t compute = nullptr)
      : streams_(std::make_shared<detail::rank_streams>(device, compute)) {}

  //! The stages' compute stream.
  [[nodiscard]] cudaStream_t resource() const noexcept { return streams_->compute; }
  //! The stream this rank's matched copies and sums run on.
  [[nodiscard]] cudaStream_t copy_stream() const noexcept { return streams_->copy; }
  //! The device.
  [[nodiscard]] int device() const noexcept { return streams_->device; }

  //! Where `stream` stands when the send or receive is posted.
  void mark(request_state& state, cudaStream_t stream) {
    use_device();
    state.mark = detail::record_event(stream);
  }
  //! Copies on this rank's copy stream once the sender's data is ready and the receiver's buffer free.
  void copy(const std::byte* from, std::byte* to, std::size_t bytes, request_state& sent, request_state& received) {
    if (bytes == 0) return;
    use_device();
    const cudaStream_t stream = streams_->copy;
    DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, sent.mark.get(), 0));
    DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, received.mark.get(), 0));
    DFLOP_CUDA_TRY(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
    sent.copied = detail::record_event(stream);
    received.copied = sent.copied;
  }
  //! Whether a matched transfer's copy is done.
  [[nodiscard]] bool finished(const request_state& state) const {
    return !state.copied || detail::event_done(state.copied.get());
  }
  //! Orders `stream` after a matched transfer's copy (no host wait).
  void order_after(const request_state& state, cudaStream_t stream) const {
    if (state.copied) DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, state.copied.get(), 0));
  }

  //! Where the member's stream stands: its gradients are final after that.
  [[nodiscard]] std::shared_ptr<void> arrive(const gradient_buffer&, cudaStream_t stream) {
    use_device();
    return detail::record_event(stream);
  }
  //! On this rank's copy stream, after every member's arrival: the member-order sum,
  //! written back to every member. Returns the event that completes with it.
  [[nodiscard]] std::shared_ptr<void> reduce(std::span<void* const> parts,
                                             std::span<const std::shared_ptr<void>> arrivals,
                                             const gradient_buffer& like) {
    if (like.count == 0) return {};
    use_device();
    const cudaStream_t stream = streams_->copy;
    for (const auto& arrival : arrivals)
      DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(arrival.get()), 0));
    if (like.type == element_type::float64) detail::sum_into_every_part_on<double>(stream, parts, like.count);
    else detail::sum_into_every_part_on<float>(stream, parts, like.count);
    return detail::record_event(stream);
  }
  //! Orders `stream` after the sum.
  void order_after_reduce(const std::shared_ptr<void>& reduced, cudaStream_t stream) const {
    if (reduced) DFLOP_CUDA_TRY(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(reduced.get()), 0));
  }
  //! Waits for the work issued on `stream`, polling against the watchdog.
  void settle(cudaStream_t stream, double seconds, int rank) const {
    use_device();
    const auto issued = detail::record_event(stream);
    detail::wait_for_event(issued.get(), seconds, rank, "the step's device work", [] {});
  }

  //! Device memory (cudaMalloc: pooled by the executor, so only in the first steps).
  [[nodiscard]] std::byte* allocate(std::size_t bytes) const {
    use_device();
    void* pointer = nullptr;
    DFLOP_CUDA_TRY(cudaMalloc(&pointer, bytes));
    return static_cast<std::byte*>(pointer);
  }
  //! Frees `allocate`'s memory.
  void deallocate(std::byte* pointer, std::size_t) const noexcept { (void)cudaFree(pointer); }

private:
  // Events, memory and Thrust's launches go to the calling thread's current device:
  // make it the transport's, whatever thread calls (cheap when it already is).
  void use_device() const { DFLOP_CUDA_TRY(cudaSetDevice(streams_->device)); }

  std::shared_ptr<detail::rank_streams> streams_;  // shared with the communicators split from this one
};

//! The world of threads that `stream_communicator`s share.
using stream_world = basic_inproc_world<stream_transport>;
//! Ranks as threads of one process on one GPU, each with its own compute stream;
//! device memory. Models `communicator`.
using stream_communicator = basic_inproc_communicator<stream_transport>;
static_assert(communicator<stream_communicator>);

//! Runs `body(stream_communicator&)` on `ranks` threads, each with a stream of its
//! own on `device`; stops every rank when one fails and rethrows the first failure
//! (see `run_inproc_with`).
template <class Body>
void run_on_streams(int ranks, Body&& body, int device = 0, double watchdog_seconds = default_watchdog_seconds) {
  run_inproc_with<stream_transport>(
      ranks, [device](int) { return stream_transport(device); }, std::forward<Body>(body), watchdog_seconds);
}

}  // namespace dflop
