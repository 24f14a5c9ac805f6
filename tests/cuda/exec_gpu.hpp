// SPDX-License-Identifier: Apache-2.0
// Host interface of the executor's GPU test (exec_gpu.cu): an affine CUDA stage
// run by the executor on one GPU (1-rank NCCL communicator, stream communicator),
// and its host reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dflop::test {

// Loss and per-stage (dw, db) gradients of one step.
struct affine_result {
  double loss = 0;                   // the step's loss (rank 0's report)
  std::vector<double> rank_losses;  // every rank's report (all the same)
  std::vector<double> gradients;  // [2 * stage + 0] = dw, [2 * stage + 1] = db (replica 0's)
  std::vector<std::vector<double>> replica_gradients;  // every data-parallel replica's, after the sum
};

// Runs `schedule` ("1f1b", "interleaved" with 2 chunks, ...) with `stages` model
// stages on one GPU (one rank) through the executor and a 1-rank NCCL communicator.
affine_result run_affine_on_gpu(const std::string& schedule, std::uint32_t chunks, std::uint32_t microbatches);

// Runs `schedule` on `ranks` x `replicas` threads of one GPU, each rank with its own
// stream, through the executor and the stream communicator; `microbatches` per replica.
affine_result run_affine_on_streams(const std::string& schedule, std::uint32_t ranks, std::uint32_t chunks,
                                    std::uint32_t microbatches, std::uint32_t replicas);

// Runs 1f1b on `ranks` stage streams where model stage `failing` throws in a
// forward; rethrows what the pipeline reports (the stage's failure).
void run_failing_stage_on_streams(std::uint32_t ranks, std::uint32_t failing);

// The same model in plain C++ (`microbatches` in all, two 64-token samples each).
affine_result run_affine_on_host(std::uint32_t stages, std::uint32_t microbatches);

}  // namespace dflop::test
