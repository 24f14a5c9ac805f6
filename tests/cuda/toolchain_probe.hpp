// SPDX-License-Identifier: Apache-2.0
//! Host-callable wrappers around the CUDA toolchain probe (compiled by nvcc).
#pragma once

#include <cstdint>
#include <vector>

namespace dflop::test {

//! NCCL's runtime version code (e.g. 22809 for 2.28.9); needs no GPU.
int nccl_runtime_version();

//! Exclusive prefix sum of `sizes` computed on the GPU with CUB (the offsets a
//! gather of variable-length samples uses). Needs a GPU.
std::vector<std::int64_t> device_exclusive_scan(const std::vector<std::int64_t>& sizes);

}  // namespace dflop::test
