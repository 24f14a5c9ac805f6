// SPDX-License-Identifier: Apache-2.0
//! \file
//! The per-batch choices besides the packer: how packed bins become (LLM
//! replica, slot) microbatches, how slots are ordered, the packing seed.
#pragma once

#include <dflop/sim/order.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

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

//! "round_robin", "balanced", "best_simulated" (plan files spell it so).
[[nodiscard]] constexpr std::string_view to_string(slot_assignment assignment) noexcept {
  switch (assignment) {
    case slot_assignment::round_robin: return "round_robin";
    case slot_assignment::balanced: return "balanced";
    case slot_assignment::best_simulated: return "best_simulated";
  }
  return "unknown";
}

//! The rule called `name`, or nullopt.
[[nodiscard]] constexpr std::optional<slot_assignment> parse_slot_assignment(std::string_view name) noexcept {
  for (auto assignment : {slot_assignment::round_robin, slot_assignment::balanced, slot_assignment::best_simulated})
    if (to_string(assignment) == name) return assignment;
  return std::nullopt;
}

//! Per-batch choices besides the packer.
struct batch_options {
  slot_assignment assignment = slot_assignment::best_simulated;  //!< bins -> (replica, slot)
  order_policy order = order_policy::neh;                  //!< slot order policy
  //! Simulations the `neh` order may spend. A large batch (see
  //! `batch_scheduler::large_order_search`) with more slots per LLM replica
  //! than this is ordered by Johnson's rule instead: the search could not try
  //! even one slot at every position.
  std::size_t order_budget = 64;
  std::uint64_t seed = 0;                                  //!< packer seed
  //! Fraction of a split backward that is weight-gradient work (ZB schedules):
  //! in a linear layer the input and weight gradients cost the same.
  double weight_gradient_share = 0.5;
  //! Bytes one GPU may hold (0: no cap). Every microbatch `schedule_batch`
  //! returns then fits: priced by the memory model as each of the schedule's
  //! in-flight microbatches of its stage, no stage of its module needs more.
  //! The planner sets it to the GPU's memory less `planner_options::memory_headroom`.
  std::int64_t memory_budget_bytes = 0;
  //! Gradient reduction bucket size in bytes (0: one all-reduce, or
  //! reduce-scatter, per stage after its last op). Above 0 the batch's predictions
  //! overlap the reduction with each stage's last gradient-producing op, bucket
  //! by bucket (`multimodal_costs::gradient_bucket_bytes`): what the executors run
  //! when the stages say their buffers final there (`stage_context::gradients_ready`,
  //! as the shipped stages do). 25 MiB by default, PyTorch DDP's bucket size:
  //! 10-50 MiB price the built-in mixtures within 0.1% of each other.
  double gradient_bucket_bytes = 25.0 * 1024 * 1024;
  //! With a memory budget and a plan that recomputes activations: each stage
  //! replica recomputes, for each microbatch, only as many of its first layers
  //! as the microbatches it really holds at once in this batch need
  //! (plan/batch_recompute.hpp), never more than the plan's count. Off: every
  //! batch recomputes the plan's count.
  bool recompute_per_batch = true;
  //! With `recompute_per_batch`: a count per microbatch (true), or one count
  //! for all of a stage replica's microbatches in the batch (false: cheaper to
  //! choose; the planner's scan ranks configurations so, its finalists and
  //! `schedule_batch` as set here).
  bool recompute_per_microbatch = true;

  friend bool operator==(const batch_options&, const batch_options&) = default;
};

//! `options` as the baselines run batches: the reference system's round-robin
//! bins-to-slots rule, slots in arrival order (no dflop ordering) and no memory
//! cap (they pack blind to memory; their plans' `fits_memory` says whether the
//! tail microbatches fit).
[[nodiscard]] constexpr batch_options as_baselines_run(batch_options options) noexcept {
  options.assignment = slot_assignment::round_robin;
  options.order = order_policy::identity;
  options.memory_budget_bytes = 0;
  return options;
}

}  // namespace dflop
