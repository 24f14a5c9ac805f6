// SPDX-License-Identifier: Apache-2.0
//! \file
//! Umbrella header: every host-side (planning) part of dflop, in data-flow
//! order: workload -> model -> cost -> plan -> schedule -> sim. CUDA/NCCL parts
//! live under dflop/cuda/ and are included on their own from .cu files.
#pragma once

#include <dflop/error.hpp>
#include <dflop/util/csv.hpp>
#include <dflop/util/parallel_for.hpp>
#include <dflop/util/progress.hpp>
#include <dflop/util/random.hpp>

#include <dflop/workload.hpp>
#include <dflop/model.hpp>
#include <dflop/cost.hpp>
#include <dflop/plan.hpp>
#include <dflop/schedule.hpp>
#include <dflop/sim.hpp>
#include <dflop/exec.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/runtime.hpp>
#include <dflop/io.hpp>
