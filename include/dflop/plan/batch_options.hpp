// SPDX-License-Identifier: Apache-2.0
//! \file
//! The per-batch choices besides the packer: how packed bins become (LLM
//! replica, slot) microbatches, how slots are ordered, the packing seed.
#pragma once

#include <dflop/sim/order.hpp>

#include <cstddef>
#include <cstdint>

namespace dflop {

//! How packed bins become (LLM replica, slot) microbatches.
enum class slot_assignment : std::uint8_t {
  //! The reference system's rule: bin i goes to replica i mod dp, slot i div dp.
  round_robin,
  //! dflop: bins grouped into slots so each slot's summed encoder work is even
  //! (the encoder runs a slot for all LLM replicas at once), then spread over
  //! replicas so each replica's LLM total is even.
  balanced,
  //! dflop's default: both of the above, each ordered (Johnson's rule when the
  //! order policy is NEH, else that policy) and simulated; the faster is kept and
  //! ordered with the configured policy.
  best_simulated,
};

//! Per-batch choices besides the packer.
struct batch_options {
  slot_assignment assignment = slot_assignment::best_simulated;  //!< bins -> (replica, slot)
  order_policy order = order_policy::neh;                  //!< slot order policy
  std::size_t order_budget = 64;                           //!< simulations the `neh` order may spend
  std::uint64_t seed = 0;                                  //!< packer seed
  //! Fraction of a split backward that is weight-gradient work (ZB schedules):
  //! in a linear layer the input and weight gradients cost the same.
  double weight_gradient_share = 0.5;

  friend bool operator==(const batch_options&, const batch_options&) = default;
};

}  // namespace dflop
