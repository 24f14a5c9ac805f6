// SPDX-License-Identifier: Apache-2.0
//! \file
//! The trainer's runs on CUDA devices (defined in device_runs.cu, the one nvcc
//! translation unit): every rank of a plan on one GPU's streams, or one rank per
//! process and GPU over NCCL. Plain C++ to include: main.cpp and the tests call them.
#pragma once

#include "plan_trainer.hpp"

#include <vector>

namespace dflop::cuda_trainer {

//! Runs every rank of `inputs.chosen` (its GPU count) as a thread on `device`,
//! each with its own stream, over `stream_communicator`. Returns each rank's
//! step reports, by world rank.
[[nodiscard]] std::vector<std::vector<step_report>> run_on_one_gpu(const trainer_inputs& inputs,
                                                                   const run_options& options, int device = 0);

//! Runs this process's rank over NCCL bootstrapped from MPI_COMM_WORLD (MPI
//! initialized, one process per GPU of the plan; a fault ends the job). Throws
//! `dflop::error` when built without MPI.
[[nodiscard]] std::vector<step_report> run_on_nccl(const trainer_inputs& inputs, const run_options& options);

}  // namespace dflop::cuda_trainer
