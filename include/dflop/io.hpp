// SPDX-License-Identifier: Apache-2.0
//! \file
//! Every reader and writer of files, in one umbrella: JSON (models, GPUs,
//! plans), CSV (costs, profiles), JSON Lines traces, SVG and Chrome-trace
//! timelines. They live behind their own headers, and none of the planning or
//! execution headers include them, so a trainer that plans and runs
//! (`dflop/pipeline.hpp` + `dflop/exec/plan_runner.hpp`) parses no JSON or
//! file I/O; include this (or `dflop/dflop.hpp`) where files are read or written.
#pragma once

#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/runtime/profile_writer.hpp>
#include <dflop/sim/chrome_trace.hpp>
#include <dflop/sim/costs_csv.hpp>
#include <dflop/sim/svg_timeline.hpp>
#include <dflop/util/csv.hpp>
#include <dflop/workload/streaming_sampling.hpp>
#include <dflop/workload/trace.hpp>
