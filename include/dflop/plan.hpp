// SPDX-License-Identifier: Apache-2.0
//! \file
//! The planning layer: parallel configurations, layer partitions, packers,
//! per-batch scheduling and the data-aware 3D parallelism search.
#pragma once

#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/layer_partition.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/pack.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/plan/rank_layout.hpp>
#include <dflop/plan/stage_memories.hpp>
