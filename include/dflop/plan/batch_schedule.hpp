// SPDX-License-Identifier: Apache-2.0
//! \file
//! One global batch made ready to run: which samples each LLM replica's
//! microbatches hold, which samples each encoder replica encodes for each slot,
//! the order the slots run in, and the per-op costs the simulator (and so the
//! prediction) uses. The executor runs exactly this.
#pragma once

#include <dflop/model/module_kind.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/sim/multimodal.hpp>

#include <cstdint>
#include <ostream>
#include <vector>

namespace dflop {

//! A packed, ordered global batch. Sample numbers index the batch as given.
struct batch_schedule {
  parallel_config config;  //!< the configuration it was made for
  //! `llm_microbatches[replica * m + slot]`: samples of LLM replica `replica`'s microbatch for `slot`.
  std::vector<std::vector<std::uint32_t>> llm_microbatches;
  //! `encoder_parts[replica * m + slot]`: samples encoder replica `replica` encodes for `slot`
  //! (those with encoder work; text-only samples skip the encoder).
  std::vector<std::vector<std::uint32_t>> encoder_parts;
  std::vector<std::uint32_t> slot_order;  //!< execution position -> slot
  multimodal_costs costs;                 //!< per-op costs, hand-offs and gradient sync, by slot
  double predicted_seconds = 0;           //!< simulated iteration time in `slot_order`
  double packing_makespan = 0;            //!< the packer's objective (max bin load)
  double packing_lower_bound = 0;         //!< its certified lower bound
  //! The memory budget (`batch_options::memory_budget_bytes`) changed this
  //! batch: the packer's first packing or an encoder split had a microbatch
  //! over it, and the batch was packed or split again within it. (A slot
  //! assignment of `best_simulated` whose encoder parts miss the budget is
  //! passed over without setting it.)
  bool memory_capped = false;
  //! How many of its first layers each encoder stage replica recomputes for
  //! each microbatch of this batch, `[(replica * m + slot) * encoder pp + stage]`
  //! (as `module_costs::at`; 0: none): the plan's count, or with
  //! `batch_options::recompute_per_batch` only what the microbatches the stage
  //! really holds at once need (plan/batch_recompute.hpp). The costs are priced
  //! with these counts; the executor tells each op its own
  //! (`stage_context::recomputed_layers`).
  std::vector<std::uint32_t> encoder_recomputed;
  //! The same for the LLM's stages, `[(replica * m + slot) * llm pp + stage]`.
  std::vector<std::uint32_t> llm_recomputed;

  //! Samples of LLM replica `replica`, slot `slot`.
  [[nodiscard]] const std::vector<std::uint32_t>& llm_microbatch(int replica, int slot) const {
    return llm_microbatches[static_cast<std::size_t>(replica * config.microbatches + slot)];
  }
  //! Samples encoder replica `replica` encodes for `slot`.
  [[nodiscard]] const std::vector<std::uint32_t>& encoder_part(int replica, int slot) const {
    return encoder_parts[static_cast<std::size_t>(replica * config.microbatches + slot)];
  }
  //! Layers stage `stage` of `kind`'s replica `replica` recomputes for its
  //! microbatch of `slot` (0 when the batch carries no counts: one not made by
  //! `batch_scheduler`).
  [[nodiscard]] std::uint32_t recomputed(module_kind kind, int replica, int slot, int stage) const {
    const auto& counts = kind == module_kind::encoder ? encoder_recomputed : llm_recomputed;
    const int stages = kind == module_kind::encoder ? config.encoder.pp : config.llm.pp;
    const auto at = static_cast<std::size_t>((replica * config.microbatches + slot) * stages + stage);
    return at < counts.size() ? counts[at] : 0;
  }
};

inline std::ostream& operator<<(std::ostream& out, const batch_schedule& batch) {
  return out << "batch_schedule{" << batch.config << ", predicted=" << batch.predicted_seconds
             << " s, packing makespan=" << batch.packing_makespan << ", lower bound=" << batch.packing_lower_bound
             << "}";
}

}  // namespace dflop
