// SPDX-License-Identifier: Apache-2.0
//! \file
//! Data-aware activation recomputation: how many of its first layers each
//! stage replica recomputes in one scheduled batch.
//!
//! The plan's recompute count (`module_parallelism::recompute_layers`) is priced
//! the way memory caps are priced: every in-flight microbatch of a stage as
//! heavy as the heaviest. That is safe for any batch but pessimistic: the
//! microbatches a stage really holds at once are those its op list has
//! forwarded and not yet backpropagated (`peak_activations`' rule), in the
//! batch's slot order, and they are rarely all heavy. Once a batch is packed and
//! ordered, its exact peaks are known, so each (stage, replica) can recompute
//! only the fewest layers with which its real peak fits the memory budget; the
//! plan's count stays the ceiling (it fits by construction), so a batch never
//! recomputes more than the plan said.
//!
//! Exactness needs a memory model whose activations are affine in the number
//! in flight: `in_flight` microbatches like X need `in_flight x kept(X) +
//! working(X)` (kept: what a microbatch stores for its backward; working:
//! what recomputing one needs while it runs), as `analytic_memory_model`
//! counts. The two parts are read off the model at 1 and 2 in flight; a stage
//! holding microbatches X1..Xk needs the sum of their kept bytes plus the
//! largest working set.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/op.hpp>
#include <dflop/util/saturating.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dflop {

//! Chooses `batch_schedule::encoder_recomputed` / `llm_recomputed` for
//! scheduled batches of one memory model. Holds reusable scratch: one per thread.
template <memory_model Memory>
class batch_recompute {
public:
  //! \param memory prices stages (see the file comment for what exactness needs)
  explicit batch_recompute(const Memory& memory) : memory_(&memory) {}

  //! The layout's own counts, the same for every replica and batch: what a
  //! batch runs without data-aware recomputation.
  static void as_planned(const plan_layout& layout, batch_schedule& out) {
    fill_planned(layout.encoder, out.encoder_recomputed);
    fill_planned(layout.llm, out.llm_recomputed);
  }

  //! Sets each (stage, replica)'s count for `out` (packed, its encoder parts
  //! split and its slots ordered, from `batch`) to the fewest of its first
  //! layers with which its exact peak fits `budget_bytes`, at most the
  //! layout's count. Returns whether some count fell below the layout's (the
  //! batch's costs must then be priced again).
  bool choose(const plan_layout& layout, std::span<const sample> batch, std::int64_t budget_bytes,
              batch_schedule& out) {
    as_planned(layout, out);
    bool lowered = false;
    const auto m = static_cast<std::size_t>(layout.config.microbatches);
    for (module_kind kind : all_module_kinds) {
      const bool encoder = kind == module_kind::encoder;
      const module_plan& plan = encoder ? layout.encoder : layout.llm;
      if (!plan.degrees.recompute || plan.degrees.pp == 0) continue;
      const auto& microbatches = encoder ? out.encoder_parts : out.llm_microbatches;
      auto& counts = encoder ? out.encoder_recomputed : out.llm_recomputed;
      const auto stages = static_cast<std::size_t>(plan.degrees.pp);
      for (std::size_t q = 0; q < static_cast<std::size_t>(plan.degrees.dp); ++q)
        for (std::size_t s = 0; s < stages; ++s) {
          const auto& ops = layout.schedule.rank_ops.at(static_cast<std::size_t>(layout.position(kind, static_cast<int>(s))));
          held_.clear();
          // This replica's microbatch at each execution position, gathered once per stage.
          replica_samples_.clear();
          replica_first_.assign(1, 0);
          for (std::size_t j = 0; j < m; ++j) {
            for (std::uint32_t i : microbatches[q * m + out.slot_order[j]]) replica_samples_.push_back(batch[i]);
            replica_first_.push_back(replica_samples_.size());
          }
          const std::uint32_t fewest = fewest_fitting(kind, plan, static_cast<int>(s), ops, budget_bytes);
          std::uint32_t& count = counts[q * stages + s];
          if (fewest < count) {
            count = fewest;
            lowered = true;
          }
        }
    }
    return lowered;
  }

private:
  static void fill_planned(const module_plan& plan, std::vector<std::uint32_t>& counts) {
    const auto stages = static_cast<std::size_t>(std::max(plan.degrees.pp, 0));
    counts.assign(static_cast<std::size_t>(std::max(plan.degrees.dp, 0)) * stages, 0);
    for (std::size_t q = 0; q < static_cast<std::size_t>(std::max(plan.degrees.dp, 0)); ++q)
      for (std::size_t s = 0; s < stages; ++s)
        counts[q * stages + s] =
            static_cast<std::uint32_t>(recomputed_layers(plan.degrees, plan.slice(static_cast<int>(s)).layers));
  }

  // The fewest recomputed layers (0 .. the plan's count) of stage `s` with
  // which the gathered replica's peak fits; the plan's count when none fits
  // below it. 0 is tried alone: recomputing nothing needs no working set, so
  // the bytes are not monotone from 0 to 1, only from 1 up.
  std::uint32_t fewest_fitting(module_kind kind, const module_plan& plan, int s, const std::vector<pipeline_op>& ops,
                               std::int64_t budget) {
    const stage_slice slice = plan.slice(s);
    const auto most = static_cast<std::uint32_t>(recomputed_layers(plan.degrees, slice.layers));
    if (most == 0) return 0;
    if (fits(kind, plan, slice, 0, ops, budget)) return 0;
    std::uint32_t low = 1, high = most;  // high fits (the plan's count), or nothing below it is tried
    while (low < high) {
      const std::uint32_t mid = low + (high - low) / 2;
      if (fits(kind, plan, slice, mid, ops, budget)) high = mid;
      else low = mid + 1;
    }
    return high;
  }

  // Whether the stage's peak over `ops` fits `budget` with `recomputed` layers.
  bool fits(module_kind kind, const module_plan& plan, stage_slice slice, std::uint32_t recomputed,
            const std::vector<pipeline_op>& ops, std::int64_t budget) {
    memory_choices choices = memory_choices_of(plan.degrees);
    choices.recompute_activations = recomputed > 0;
    choices.recompute_layers = recomputed;
    const int tp = plan.degrees.tp;
    const std::int64_t fixed = estimate_memory_with(*memory_, kind, tp, slice, 0, {}, choices).total();
    const std::size_t m = replica_first_.size() - 1;
    kept_.assign(m, 0);
    working_.assign(m, 0);
    for (std::size_t j = 0; j < m; ++j) {
      const std::span<const sample> mb(replica_samples_.data() + replica_first_[j],
                                       replica_first_[j + 1] - replica_first_[j]);
      if (mb.empty()) continue;
      const std::int64_t one = estimate_memory_with(*memory_, kind, tp, slice, 1, mb, choices).activations;
      const std::int64_t two = estimate_memory_with(*memory_, kind, tp, slice, 2, mb, choices).activations;
      kept_[j] = two - one;
      working_[j] = std::max<std::int64_t>(2 * one - two, 0);
    }
    held_.clear();
    for (const pipeline_op& op : ops) {
      if (op.kind == op_kind::forward) {
        held_.push_back(op.microbatch);
        std::int64_t kept = 0, working = 0;
        for (std::uint32_t j : held_) {
          kept = saturating_add(kept, kept_[j]);
          working = std::max(working, working_[j]);
        }
        if (saturating_add(fixed, saturating_add(kept, working)) > budget) return false;
      } else if (op.kind == op_kind::backward) {
        const auto at = std::find(held_.begin(), held_.end(), op.microbatch);
        if (at != held_.end()) held_.erase(at);
      }
    }
    return true;
  }

  const Memory* memory_;
  std::vector<sample> replica_samples_;
  std::vector<std::size_t> replica_first_;
  std::vector<std::int64_t> kept_, working_;
  std::vector<std::uint32_t> held_;
};

}  // namespace dflop
