// SPDX-License-Identifier: Apache-2.0
//! \file
//! CUDA and NCCL failures as `dflop::cuda_error` exceptions that name the call,
//! the file and line, and the library's own message.
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/error.hpp>

#include <nccl.h>

#include <string>

namespace dflop {

//! A failed CUDA runtime or NCCL call.
class cuda_error : public error {
public:
  using error::error;
};

namespace detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Reading the last error clears a non-sticky error so later calls are not blamed for this one.
  (void)cudaGetLastError();
  throw cuda_error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                   cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

[[noreturn]] inline void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line,
                                          const char* detail_text) {
  std::string text = std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                     ncclGetErrorString(status);
  if (detail_text != nullptr && *detail_text != '\0') text += std::string(" (") + detail_text + ")";
  throw cuda_error(text);
}

}  // namespace detail
}  // namespace dflop

//! Evaluates a CUDA runtime call; throws `dflop::cuda_error` naming it when it fails.
#define DFLOP_CUDA_TRY(call)                                                         \
  do {                                                                               \
    const cudaError_t dflop_cuda_status_ = (call);                                   \
    if (dflop_cuda_status_ != cudaSuccess)                                           \
      ::dflop::detail::throw_cuda_error(dflop_cuda_status_, #call, __FILE__, __LINE__); \
  } while (false)

//! Evaluates an NCCL call on communicator-free paths; throws `dflop::cuda_error` naming it.
#define DFLOP_NCCL_TRY(call)                                                                   \
  do {                                                                                         \
    const ncclResult_t dflop_nccl_status_ = (call);                                            \
    if (dflop_nccl_status_ != ncclSuccess)                                                     \
      ::dflop::detail::throw_nccl_error(dflop_nccl_status_, #call, __FILE__, __LINE__, nullptr); \
  } while (false)
