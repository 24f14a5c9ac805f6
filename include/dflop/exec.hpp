// SPDX-License-Identifier: Apache-2.0
//! \file
//! The execution layer (host side): stage and communicator concepts, the
//! in-process communicator, the executor, the plan runner, the emulated stage
//! and the sequential reference. The MPI
//! communicator (`dflop/exec/mpi_communicator.hpp`, needs MPI) and the NCCL one
//! (`dflop/cuda/nccl_communicator.cuh`, needs nvcc) are included on their own.
#pragma once

#include <dflop/exec/buffer_pool.hpp>
#include <dflop/exec/communicator.hpp>
#include <dflop/exec/emulated_stage.hpp>
#include <dflop/exec/executor.hpp>
#include <dflop/exec/failure.hpp>
#include <dflop/exec/gradient_buffer.hpp>
#include <dflop/exec/handoff.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/exec/microbatch_view.hpp>
#include <dflop/exec/multimodal_executor.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/exec/sequential_reference.hpp>
#include <dflop/exec/stage.hpp>
#include <dflop/exec/step_result.hpp>
