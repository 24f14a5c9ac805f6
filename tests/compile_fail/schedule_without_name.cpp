// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a schedule without name() (plans record it).
#include <dflop/pipeline.hpp>

struct schedule_without_name {
  dflop::pipeline_schedule make(const dflop::schedule_shape& shape) const { return dflop::one_f_one_b{}.make(shape); }
};
using broken =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, schedule_without_name>;
broken::planner_type* unused = nullptr;
