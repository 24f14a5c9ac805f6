// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: make returns bare per-rank op lists, not the
// dflop::pipeline_schedule that also records name, ranks and chunks.
#include <dflop/pipeline.hpp>

#include <vector>

struct schedule_returning_ops {
  static constexpr std::string_view name() noexcept { return "ops"; }
  std::vector<std::vector<dflop::pipeline_op>> make(const dflop::schedule_shape& shape) const {
    return dflop::one_f_one_b{}.make(shape).rank_ops;
  }
};
using broken =
    dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer, schedule_returning_ops>;
broken::planner_type* unused = nullptr;
