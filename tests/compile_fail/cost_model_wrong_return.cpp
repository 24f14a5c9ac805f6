// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: estimate_time returns a pass_time, not the module_cost the
// planner splits into layer, embedding and head.
#include <dflop/pipeline.hpp>

struct cost_model_returning_pass_time {
  dflop::pass_time estimate_time(dflop::module_kind, int, std::span<const dflop::sample>) const { return {}; }
};
using broken = dflop::pipeline<cost_model_returning_pass_time>;
broken::planner_type* unused = nullptr;
