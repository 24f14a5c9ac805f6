// SPDX-License-Identifier: Apache-2.0
#include "toolchain_probe.hpp"

#include <dflop/cuda/error.cuh>

#include <cub/device/device_scan.cuh>
#include <thrust/device_vector.h>

namespace dflop::test {

int nccl_runtime_version() {
  int version = 0;
  DFLOP_NCCL_TRY(ncclGetVersion(&version));
  return version;
}

std::vector<std::int64_t> device_exclusive_scan(const std::vector<std::int64_t>& sizes) {
  thrust::device_vector<std::int64_t> input(sizes.begin(), sizes.end());
  thrust::device_vector<std::int64_t> output(sizes.size());
  std::size_t scratch_bytes = 0;
  DFLOP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, scratch_bytes, input.data().get(), output.data().get(),
                                               static_cast<int>(sizes.size())));
  thrust::device_vector<std::uint8_t> scratch(scratch_bytes);
  DFLOP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(scratch.data().get(), scratch_bytes, input.data().get(),
                                               output.data().get(), static_cast<int>(sizes.size())));
  DFLOP_CUDA_TRY(cudaDeviceSynchronize());
  std::vector<std::int64_t> result(sizes.size());
  thrust::copy(output.begin(), output.end(), result.begin());
  return result;
}

}  // namespace dflop::test
