// SPDX-License-Identifier: Apache-2.0
//! \file
//! How much of a GPU's peak one kernel-sized piece of work achieves: small work
//! is dominated by launch and memory overheads, large work saturates below peak.
#pragma once

#include <ostream>

namespace dflop {

//! Achieved fraction of peak for work w (FLOPs on one GPU):
//! `eff(w) = max_efficiency * w / (w + half_saturation_flops)`. The time of w is then
//! `w / (peak * eff(w)) = (w + half_saturation_flops) / (peak * max_efficiency)`: a
//! fixed overhead `half_saturation_flops / (peak * max_efficiency)` plus work at the
//! saturated rate. Defaults: 55% of peak (what Megatron-class trainers reach on
//! Hopper), half of that at 3e10 FLOPs (about 55 us of overhead per layer on an H100).
struct throughput_curve {
  double max_efficiency = 0.55;         //!< fraction of peak reached by very large work, in (0, 1]
  double half_saturation_flops = 3e10;  //!< work that reaches half of `max_efficiency`, >= 0

  //! Achieved fraction of peak for `flops` of work (0 for no work).
  [[nodiscard]] constexpr double efficiency(double flops) const noexcept {
    return flops > 0 ? max_efficiency * flops / (flops + half_saturation_flops) : 0.0;
  }

  //! Seconds `flops` of work takes at `peak_flops` FLOP/s (0 for no work).
  [[nodiscard]] constexpr double seconds(double flops, double peak_flops) const noexcept {
    return flops > 0 ? (flops + half_saturation_flops) / (peak_flops * max_efficiency) : 0.0;
  }

  friend bool operator==(const throughput_curve&, const throughput_curve&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const throughput_curve& curve) {
  return out << "throughput_curve{max_efficiency=" << curve.max_efficiency
             << ", half_saturation_flops=" << curve.half_saturation_flops << "}";
}

}  // namespace dflop
