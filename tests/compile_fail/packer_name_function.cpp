// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: the packer's name is a function (as for partitioners and
// schedules), but packers need a static data member.
#include <dflop/pipeline.hpp>

struct packer_with_name_function {
  static constexpr std::string_view name() noexcept { return "mine"; }
  void pack(const dflop::cost_matrix&, std::size_t, const dflop::pack_options&, dflop::pack_workspace&,
            dflop::packing&) const {}
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, packer_with_name_function>;
broken::planner_type* unused = nullptr;
