// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: the packer's name is a data member, but every policy
// (partitioner, schedule, packer) names itself with a `name()` function.
#include <dflop/pipeline.hpp>

struct packer_with_name_member {
  static constexpr std::string_view name = "mine";
  void pack(const dflop::cost_matrix&, std::size_t, const dflop::pack_options&, dflop::pack_workspace&,
            dflop::packing&) const {}
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, packer_with_name_member>;
broken::planner_type* unused = nullptr;
