// SPDX-License-Identifier: Apache-2.0
//! \file
//! The CUDA backend of `model_stage`: each functor of model.hpp runs as a kernel
//! (one thread per element) on the rank's stream; parameters, gradients and the
//! loss live in device memory; row tables go host -> pinned staging -> the
//! executor's scratch memory with one asynchronous copy on the stream. The host
//! waits for the stream only in `read` (once per step, for the loss).
#pragma once

#include <dflop/cuda/config.cuh>
#include <dflop/cuda/error.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace dflop::cuda_trainer {

namespace detail {
//! body(i) for every i < count, one thread each.
template <class Body>
__global__ void for_each_element(std::size_t count, Body body) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) body(i);
}

struct device_free {
  void operator()(double* pointer) const noexcept { (void)cudaFree(pointer); }
};
struct pinned_free {
  void operator()(std::byte* pointer) const noexcept { (void)cudaFreeHost(pointer); }
};
}  // namespace detail

//! Runs `model_stage` on the current CUDA device (see the file comment).
class device_backend {
public:
  //! Stages run on the rank's stream.
  using resource_type = cudaStream_t;

  //! Owning device memory of doubles.
  class array {
  public:
    //! Device memory holding `values` (copied before the constructor returns).
    explicit array(const std::vector<double>& values) : size_(values.size()) {
      if (values.empty()) return;
      double* pointer = nullptr;
      DFLOP_CUDA_TRY(cudaMalloc(&pointer, values.size() * sizeof(double)));
      data_.reset(pointer);
      DFLOP_CUDA_TRY(cudaMemcpy(pointer, values.data(), values.size() * sizeof(double), cudaMemcpyHostToDevice));
      // A pageable copy may return before it lands; the stages' streams do not wait for the legacy stream.
      DFLOP_CUDA_TRY(cudaStreamSynchronize(nullptr));
    }
    [[nodiscard]] double* data() noexcept { return data_.get(); }
    [[nodiscard]] const double* data() const noexcept { return data_.get(); }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  private:
    std::unique_ptr<double, detail::device_free> data_;
    std::size_t size_ = 0;
  };

  //! Launches `body(i)` for i in [0, count) on `stream` (nothing for 0).
  template <class Body>
  void launch(cudaStream_t stream, std::size_t count, const Body& body) const {
    if (count == 0) return;
    constexpr unsigned threads = 256;
    const auto blocks = static_cast<unsigned>((count + threads - 1) / threads);
    detail::for_each_element<<<blocks, threads, 0, stream>>>(count, body);
    DFLOP_CUDA_TRY(cudaPeekAtLastError());
  }
  //! Stages `bytes` of a host table in pinned memory and copies them into
  //! `scratch` (device memory from the executor) on `stream`; returns `scratch`.
  const void* table(const void* values, std::size_t bytes, std::byte* scratch, cudaStream_t stream) {
    if (bytes == 0) return scratch;
    std::byte* staged = stage(bytes);
    std::memcpy(staged, values, bytes);
    DFLOP_CUDA_TRY(cudaMemcpyAsync(scratch, staged, bytes, cudaMemcpyHostToDevice, stream));
    return scratch;
  }
  //! Device-to-device copy on `stream`.
  void copy(void* to, const void* from, std::size_t bytes, cudaStream_t stream) const {
    if (bytes > 0) DFLOP_CUDA_TRY(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  //! Zeroes `count` device values on `stream`.
  void zero(double* values, std::size_t count, cudaStream_t stream) const {
    if (count > 0) DFLOP_CUDA_TRY(cudaMemsetAsync(values, 0, count * sizeof(double), stream));
  }
  //! Reads one device value after the work issued on `stream` (the host waits).
  [[nodiscard]] double read(const double* value, cudaStream_t stream) {
    std::byte* staged = stage(sizeof(double));
    DFLOP_CUDA_TRY(cudaMemcpyAsync(staged, value, sizeof(double), cudaMemcpyDeviceToHost, stream));
    DFLOP_CUDA_TRY(cudaStreamSynchronize(stream));
    double out = 0;
    std::memcpy(&out, staged, sizeof out);
    return out;
  }
  //! After the step's work is done (the stream waited for): the staging memory is free again.
  void end_step() noexcept {
    for (auto& block : blocks_) block.used = 0;
  }

private:
  // Pinned blocks, reused every step: a copy reads its bytes when the stream reaches it.
  struct pinned_block {
    std::unique_ptr<std::byte, detail::pinned_free> data;
    std::size_t size = 0;
    std::size_t used = 0;
  };
  std::byte* stage(std::size_t bytes) {
    bytes = (bytes + 15) / 16 * 16;
    for (auto& block : blocks_)
      if (block.size - block.used >= bytes) {
        std::byte* at = block.data.get() + block.used;
        block.used += bytes;
        return at;
      }
    pinned_block block;
    block.size = std::max<std::size_t>(bytes, std::size_t{1} << 20);
    std::byte* pointer = nullptr;
    DFLOP_CUDA_TRY(cudaMallocHost(&pointer, block.size));
    block.data.reset(pointer);
    block.used = bytes;
    blocks_.push_back(std::move(block));
    return pointer;
  }
  std::vector<pinned_block> blocks_;
};

}  // namespace dflop::cuda_trainer
