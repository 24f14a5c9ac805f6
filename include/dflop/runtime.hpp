// SPDX-License-Identifier: Apache-2.0
//! \file
//! The runtime layer (host parts): measure costs (profiler -> profile CSV ->
//! fitted model), refine them while training runs (online cost model, drift
//! monitor), and plan batches ahead on a background thread (async planner).
//! The CUDA event timer lives apart in dflop/cuda/event_timer.cuh.
#pragma once

#include <dflop/runtime/async_planner.hpp>
#include <dflop/runtime/calibrated_cost_model.hpp>
#include <dflop/runtime/drift_monitor.hpp>
#include <dflop/runtime/online_cost_model.hpp>
#include <dflop/runtime/profile_writer.hpp>
#include <dflop/runtime/profiler.hpp>
#include <dflop/runtime/recursive_least_squares.hpp>
#include <dflop/runtime/timer.hpp>
#include <dflop/runtime/timing_summary.hpp>
