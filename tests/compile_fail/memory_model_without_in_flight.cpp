// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: estimate_memory lacks the `int in_flight` parameter.
#include <dflop/pipeline.hpp>

struct memory_model_without_in_flight {
  dflop::memory_breakdown estimate_memory(dflop::module_kind, int, dflop::stage_slice,
                                          std::span<const dflop::sample>) const {
    return {};
  }
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer,
                               dflop::one_f_one_b, memory_model_without_in_flight>;
broken::planner_type* unused = nullptr;
