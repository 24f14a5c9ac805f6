// SPDX-License-Identifier: Apache-2.0
#include "runtime_event_timer.hpp"

#include <dflop/cuda/event_timer.cuh>
#include <dflop/runtime/profiler.hpp>

namespace dflop::test {
namespace {

__global__ void spin(std::int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

//! A GPU stage: the forward spins a + b n + c n^2 cycles and keeps n x bytes_per_token bytes until its backward.
struct spinning_stage {
  double a = 2e6, b = 200, c = 0.05;  // cycles: about 1 ms to 10 ms at 2 GHz
  std::size_t bytes_per_token = 1024;
  void* kept = nullptr;
  [[nodiscard]] std::int64_t cycles(const profile_case& at) const {
    return static_cast<std::int64_t>(a + b * at.size + c * at.size * at.size);
  }
  void forward(const profile_case& at) {
    DFLOP_CUDA_TRY(cudaMalloc(&kept, static_cast<std::size_t>(at.count()) * bytes_per_token));
    spin<<<1, 1>>>(cycles(at));
    DFLOP_CUDA_TRY(cudaGetLastError());
  }
  void backward(const profile_case& at) {
    spin<<<1, 1>>>(2 * cycles(at));
    DFLOP_CUDA_TRY(cudaGetLastError());
    DFLOP_CUDA_TRY(cudaFree(kept));
    kept = nullptr;
  }
};

}  // namespace

double time_spin_kernel(std::int64_t cycles, bool flush_l2) {
  event_timer timer({nullptr, flush_l2, 0});
  spin<<<1, 1>>>(1000);  // warm up the launch path
  DFLOP_CUDA_TRY(cudaDeviceSynchronize());
  return timer.measure([&] { spin<<<1, 1>>>(cycles); });
}

gpu_profile_check profile_spin_kernel() {
  spinning_stage stage;
  profiler<event_timer> profiler({.warmup = 2, .repeats = 7});
  const module_piece llm_layer{module_kind::llm, module_part::layer};
  const profile_grid grid{profile_size::tokens, {1024, 2048, 4096, 8192, 16384}, {1}};
  profiler.measure(llm_layer, grid, stage);
  const auto fitted = profiler.fit();
  gpu_profile_check check;
  check.bytes_per_token = stage.bytes_per_token;
  for (const auto& point : profiler.table().curves.front().points) {
    check.sizes.push_back(point.size);
    check.forward_medians.push_back(point.forward_seconds);
    check.backward_medians.push_back(point.backward_seconds);
    check.forward_fitted.push_back(fitted.estimate_part(llm_layer, 1, uniform_shape(1, point.size)).forward);
    check.activation_bytes.push_back(point.activation_bytes.value_or(-1));
  }
  return check;
}

}  // namespace dflop::test
