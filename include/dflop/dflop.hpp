// SPDX-License-Identifier: Apache-2.0
//! \file
//! Umbrella header: every host-side (planning) part of dflop. CUDA/NCCL parts
//! live under dflop/cuda/ and are included on their own from .cu files.
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sample.hpp>
