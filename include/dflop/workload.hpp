// SPDX-License-Identifier: Apache-2.0
//! \file
//! The workload layer: samples, JSONL traces, statistics, batch sampling and synthetic mixtures.
#pragma once

#include <dflop/workload/mixture.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/sampling.hpp>
#include <dflop/workload/statistics.hpp>
#include <dflop/workload/streaming_sampling.hpp>
#include <dflop/workload/trace.hpp>
