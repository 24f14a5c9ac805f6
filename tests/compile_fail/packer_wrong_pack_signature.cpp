// SPDX-License-Identifier: Apache-2.0
// Must NOT compile: pack returns its packing instead of filling one through the
// workspace-reusing signature.
#include <dflop/pipeline.hpp>

struct packer_returning_packing {
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "returning"; }
  dflop::packing pack(const dflop::cost_matrix&, std::size_t, const dflop::pack_options&) const { return {}; }
};
using broken = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, packer_returning_packing>;
broken::planner_type* unused = nullptr;
