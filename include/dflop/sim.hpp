// SPDX-License-Identifier: Apache-2.0
//! \file
//! Umbrella header for simulation: costs, the exact pipeline and multimodal
//! simulators, microbatch ordering, timelines (text, SVG and Chrome trace).
#pragma once

#include <dflop/sim/chrome_trace.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/sim/costs_csv.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/order.hpp>
#include <dflop/sim/pipeline_simulator.hpp>
#include <dflop/sim/result.hpp>
#include <dflop/sim/svg_timeline.hpp>
#include <dflop/sim/text_timeline.hpp>
#include <dflop/sim/time_breakdown.hpp>
#include <dflop/sim/timeline.hpp>
