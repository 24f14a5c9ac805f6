// SPDX-License-Identifier: Apache-2.0
//! \file
//! Shared CUDA events: the communicators' requests hold them, several requests may
//! share one (the two ends of an on-device copy), and the last holder destroys it.
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>
#include <dflop/exec/failure.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace dflop::detail {

//! Destroys a CUDA event (CUDA defers it until recorded work on it completed).
struct cuda_event_deleter {
  void operator()(CUevent_st* event) const noexcept { (void)cudaEventDestroy(event); }
};
//! A shared CUDA event (destroyed when the last request holding it goes).
using shared_cuda_event = std::shared_ptr<CUevent_st>;

//! A new event without timing (cheaper to record and wait on).
inline shared_cuda_event make_event() {
  cudaEvent_t event = nullptr;
  DFLOP_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return {event, cuda_event_deleter{}};
}

//! A new event recorded on `stream`: completes with the work issued there so far.
inline shared_cuda_event record_event(cudaStream_t stream) {
  auto event = make_event();
  DFLOP_CUDA_TRY(cudaEventRecord(event.get(), stream));
  return event;
}

//! Whether `event` completed (an event query; never blocks).
inline bool event_done(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    // Clear "not ready" only: an earlier launch error must stay for its own check.
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    return false;
  }
  DFLOP_CUDA_TRY(status);
  return true;
}

//! The host's wait for `event`: queries it (a short spin, then 50 us sleeps),
//! calling `check()` between queries (an asynchronous error source such as
//! NCCL's), and throws `watchdog_timeout` reading "rank R: watchdog: WHAT did not
//! finish within S s" once `seconds` passed.
template <class Check>
void wait_for_event(cudaEvent_t event, double seconds, int rank, const char* what, Check&& check) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned spin = 0; !event_done(event); ++spin) {
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    check();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      throw watchdog_timeout("rank " + std::to_string(rank) + ": watchdog: " + what + " did not finish within " +
                             std::to_string(seconds) + " s");
  }
}

}  // namespace dflop::detail
