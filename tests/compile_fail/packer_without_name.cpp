// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: a packer without `name()`.
#include <dflop/pipeline.hpp>

struct packer_without_name {
  void pack(const dflop::cost_matrix&, std::size_t, const dflop::pack_options&, dflop::pack_workspace&,
            dflop::packing&) const {}
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, packer_without_name>;
broken::planner_type* unused = nullptr;
