// SPDX-License-Identifier: Apache-2.0
//! \file
//! The cost layer: what a microbatch costs in time and memory. Concepts
//! (`cost_model`, `memory_model`) and the shipped models (analytic FLOPs,
//! profiled table, fitted quadratic; analytic memory).
#pragma once

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/piecewise_linear.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/cost/quadratic_fit.hpp>
#include <dflop/cost/stage_slice.hpp>
#include <dflop/cost/table_cost_model.hpp>
#include <dflop/cost/throughput_curve.hpp>
