// SPDX-License-Identifier: Apache-2.0
// The trainer's device code: model_stage over the CUDA backend (its functors
// become kernels here), run by plan_runner over the stream communicator (ranks
// as threads of one GPU) or NCCL (one process per GPU, bootstrapped from MPI).
#include "device_backend.cuh"
#include "device_runs.hpp"

#include <dflop/cuda/stream_communicator.cuh>

#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
#include <dflop/cuda/mpi_bootstrap.cuh>
#endif

namespace dflop::cuda_trainer {

static_assert(pipeline_stage<model_stage<device_backend>, basic_stage_context<cudaStream_t>>);

std::vector<std::vector<step_report>> run_on_one_gpu(const trainer_inputs& inputs, const run_options& options,
                                                     int device) {
  const int ranks = inputs.chosen.cluster.gpus;
  std::vector<std::vector<step_report>> reports(static_cast<std::size_t>(ranks));
  run_on_streams(
      ranks,
      [&](stream_communicator& world) {
        reports[static_cast<std::size_t>(world.rank())] = train_rank<device_backend>(world, inputs, options);
      },
      device, options.watchdog);
  return reports;
}

std::vector<step_report> run_on_nccl(const trainer_inputs& inputs, const run_options& options) {
#if defined(DFLOP_CUDA_TRAINER_WITH_MPI)
  nccl_communicator world = nccl_from_mpi(MPI_COMM_WORLD, nullptr, options.watchdog);
  return train_rank<device_backend>(world, inputs, options);
#else
  (void)inputs;
  (void)options;
  throw error("dflop-cuda-trainer was built without MPI: no NCCL bootstrap");
#endif
}

}  // namespace dflop::cuda_trainer
