// SPDX-License-Identifier: Apache-2.0
//! \file
//! The profiler's timer policy for GPU work: CUDA events recorded on a stream
//! around the work, optionally after flushing L2 (cold-cache timings), and a
//! device-memory probe (`cudaMemGetInfo`) for activation memory.
//!
//!     dflop::profiler<dflop::event_timer> profiler({.repeats = 10}, dflop::event_timer({.stream = stream}));
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>
#include <dflop/runtime/timer.hpp>

#include <concepts>
#include <cstddef>
#include <functional>
#include <utility>

namespace dflop {

//! Knobs of `event_timer`.
struct event_timer_options {
  cudaStream_t stream = nullptr;  //!< the stream the timed work runs on (null: the default stream)
  //! Before each timed run, write a buffer larger than L2 on `stream`, so the work
  //! starts with a cold cache (as it does after other layers in training).
  bool flush_l2 = false;
  std::size_t flush_bytes = 0;  //!< size of that buffer; 0: twice the current device's L2
};

//! Times work enqueued on a stream with a pair of CUDA events: `measure(work)` records
//! the start event, calls `work()` (which launches on `options.stream`), records the
//! stop event, waits for it and returns the elapsed GPU time in seconds. Models
//! `memory_probing_timer`: `memory_in_use()` is the device's total minus free memory
//! (device-wide: other processes and caching allocators count too). Movable, not copyable.
class event_timer {
public:
  //! Creates the events (and the flush buffer when asked) on the current device.
  //! \throws cuda_error naming the failed call.
  explicit event_timer(event_timer_options options = {}) : options_(options) {
    DFLOP_CUDA_TRY(cudaEventCreate(&start_));
    try {
      DFLOP_CUDA_TRY(cudaEventCreate(&stop_));
      if (options_.flush_l2) {
        if (options_.flush_bytes == 0) {
          int device = 0, l2_bytes = 0;
          DFLOP_CUDA_TRY(cudaGetDevice(&device));
          DFLOP_CUDA_TRY(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
          options_.flush_bytes = 2 * static_cast<std::size_t>(l2_bytes > 0 ? l2_bytes : 64 << 20);
        }
        DFLOP_CUDA_TRY(cudaMalloc(&flush_buffer_, options_.flush_bytes));
      }
    } catch (...) {
      release();
      throw;
    }
  }

  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  //! Takes over `other`'s events and buffer.
  event_timer(event_timer&& other) noexcept
      : options_(other.options_), start_(std::exchange(other.start_, nullptr)),
        stop_(std::exchange(other.stop_, nullptr)), flush_buffer_(std::exchange(other.flush_buffer_, nullptr)),
        flushes_(other.flushes_) {}
  //! Releases this timer's resources and takes over `other`'s.
  event_timer& operator=(event_timer&& other) noexcept {
    if (this != &other) {
      release();
      options_ = other.options_;
      start_ = std::exchange(other.start_, nullptr);
      stop_ = std::exchange(other.stop_, nullptr);
      flush_buffer_ = std::exchange(other.flush_buffer_, nullptr);
      flushes_ = other.flushes_;
    }
    return *this;
  }
  //! Destroys the events and frees the flush buffer.
  ~event_timer() { release(); }

  //! Runs `work()` between two events on the stream; returns the GPU time in seconds.
  //! \throws cuda_error naming the failed call; exceptions of `work` propagate.
  template <std::invocable Work>
  double measure(Work&& work) {
    if (flush_buffer_ != nullptr)
      DFLOP_CUDA_TRY(cudaMemsetAsync(flush_buffer_, static_cast<int>(++flushes_ & 0xff), options_.flush_bytes,
                                     options_.stream));
    DFLOP_CUDA_TRY(cudaEventRecord(start_, options_.stream));
    std::invoke(std::forward<Work>(work));
    DFLOP_CUDA_TRY(cudaEventRecord(stop_, options_.stream));
    DFLOP_CUDA_TRY(cudaEventSynchronize(stop_));
    float milliseconds = 0;
    DFLOP_CUDA_TRY(cudaEventElapsedTime(&milliseconds, start_, stop_));
    return static_cast<double>(milliseconds) * 1e-3;
  }

  //! Device memory in use now, bytes (total - free of the current device).
  //! \throws cuda_error when `cudaMemGetInfo` fails.
  [[nodiscard]] double memory_in_use() const {
    std::size_t free_bytes = 0, total_bytes = 0;
    DFLOP_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<double>(total_bytes - free_bytes);
  }

  //! The options in use (`flush_bytes` resolved when flushing).
  [[nodiscard]] const event_timer_options& options() const noexcept { return options_; }

private:
  void release() noexcept {
    // Destruction paths never throw: failures here only leak a handle.
    if (flush_buffer_ != nullptr) (void)cudaFree(flush_buffer_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    flush_buffer_ = nullptr;
    stop_ = start_ = nullptr;
  }

  event_timer_options options_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  void* flush_buffer_ = nullptr;
  unsigned flushes_ = 0;
};

static_assert(memory_probing_timer<event_timer>);

}  // namespace dflop
