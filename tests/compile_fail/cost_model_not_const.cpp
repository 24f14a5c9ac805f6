// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: estimate_time is not const (the planner prices through a
// const reference).
#include <dflop/pipeline.hpp>

struct cost_model_with_mutable_estimate_time {
  dflop::module_cost estimate_time(dflop::module_kind, int, std::span<const dflop::sample>) { return {}; }
};
using broken = dflop::pipeline<cost_model_with_mutable_estimate_time>;
broken::planner_type* unused = nullptr;
