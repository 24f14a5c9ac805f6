// SPDX-License-Identifier: Apache-2.0
//! \file
//! One module's place in a plan: its parallel degrees and which layers each of
//! its pipeline stages holds.
#pragma once

#include <dflop/cost/stage_slice.hpp>
#include <dflop/plan/layer_partition.hpp>
#include <dflop/plan/parallel_config.hpp>

#include <cstdint>
#include <ostream>
#include <vector>

namespace dflop {

//! A module's degrees and layer split: stage s holds layers
//! [`first_layer[s]`, `first_layer[s + 1]`), the first stage also the
//! embedding, the last the head (projector or LM head).
struct module_plan {
  module_parallelism degrees;             //!< tp, pp, dp
  std::vector<std::int64_t> first_layer;  //!< pp + 1 boundaries; front 0, back = the module's layers

  //! Layers of the module.
  [[nodiscard]] std::int64_t layers() const noexcept { return first_layer.empty() ? 0 : first_layer.back(); }
  //! What stage `stage` holds.
  [[nodiscard]] stage_slice slice(int stage) const {
    const auto s = static_cast<std::size_t>(stage);
    return layer_range(first_layer[s], first_layer[s + 1], layers());
  }

  friend bool operator==(const module_plan&, const module_plan&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const module_plan& plan) {
  out << plan.degrees << " layers";
  for (std::size_t s = 0; s + 1 < plan.first_layer.size(); ++s)
    out << (s ? " | " : " ") << "[" << plan.first_layer[s] << "," << plan.first_layer[s + 1] << ")";
  return out;
}

//! A module plan from a layer partition over the module's layers.
[[nodiscard]] inline module_plan make_module_plan(module_parallelism degrees, const layer_partition& partition) {
  module_plan plan{degrees, {}};
  plan.first_layer.assign(partition.first_layer.begin(), partition.first_layer.end());
  return plan;
}

}  // namespace dflop
