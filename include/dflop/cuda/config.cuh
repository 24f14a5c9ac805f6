// SPDX-License-Identifier: Apache-2.0
//! \file
//! Guard for dflop's CUDA tree: these headers need nvcc (or another CUDA
//! compiler); host planning code never includes them.
#pragma once

#if !defined(__CUDACC__)
#error "dflop/cuda/*.cuh needs a CUDA compiler: compile this translation unit as CUDA (.cu) and link dflop::cuda"
#endif

#include <cuda_runtime.h>
