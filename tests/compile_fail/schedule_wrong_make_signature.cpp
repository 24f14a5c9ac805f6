// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: make takes the stage and microbatch counts instead of a
// dflop::schedule_shape.
#include <dflop/pipeline.hpp>

#include <cstdint>

struct schedule_taking_counts {
  static constexpr std::string_view name() noexcept { return "counts"; }
  dflop::pipeline_schedule make(std::uint32_t stages, std::uint32_t microbatches) const {
    return dflop::one_f_one_b{}.make({stages, microbatches});
  }
};
using broken =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, schedule_taking_counts>;
broken::planner_type* unused = nullptr;
