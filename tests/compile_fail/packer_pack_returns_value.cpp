// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: pack takes the right arguments but returns a status
// instead of void.
#include <dflop/pipeline.hpp>

struct packer_returning_status {
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "status"; }
  bool pack(const dflop::cost_matrix&, std::size_t, const dflop::pack_options&, dflop::pack_workspace&,
            dflop::packing&) const {
    return true;
  }
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, packer_returning_status>;
broken::planner_type* unused = nullptr;
