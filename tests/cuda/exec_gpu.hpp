// SPDX-License-Identifier: Apache-2.0
// Host interface of the executor's GPU test (exec_gpu.cu): an affine CUDA stage
// run by the executor over a 1-rank NCCL communicator, and its host reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dflop::test {

// Loss and per-stage (dw, db) gradients of one step.
struct affine_result {
  double loss = 0;
  std::vector<double> gradients;  // [2 * stage + 0] = dw, [2 * stage + 1] = db
};

// Runs `schedule` ("1f1b", "interleaved" with 2 chunks, ...) with `stages` model
// stages on one GPU (one rank) through the executor and a 1-rank NCCL communicator.
affine_result run_affine_on_gpu(const std::string& schedule, std::uint32_t chunks, std::uint32_t microbatches);

// The same model in plain C++.
affine_result run_affine_on_host(std::uint32_t stages, std::uint32_t microbatches);

}  // namespace dflop::test
