// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a schedule that owns a unique_ptr cannot be copied into
// plans and runners.
#include <dflop/pipeline.hpp>

#include <memory>

struct schedule_owning_state {
  static constexpr std::string_view name() noexcept { return "stateful"; }
  dflop::pipeline_schedule make(const dflop::schedule_shape& shape) const { return dflop::one_f_one_b{}.make(shape); }
  std::unique_ptr<int> state;
};
using broken =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, schedule_owning_state>;
broken::planner_type* unused = nullptr;
