// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a memory model without estimate_memory (say, a cost model
// passed in the wrong slot).
#include <dflop/pipeline.hpp>

using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer,
                               dflop::one_f_one_b, dflop::flops_cost_model>;
broken::planner_type* unused = nullptr;
