// SPDX-License-Identifier: Apache-2.0
//! \file
//! Memory as a cap per microbatch. A stage of a layout holds its layers and
//! keeps the schedule's in-flight peak of microbatches alive; priced the way
//! the planner prices its tails (every in-flight microbatch of the stage like
//! this one, with the module's memory savers), a microbatch fits when no stage
//! of its module needs more than the budget. The batch scheduler checks every
//! LLM microbatch and encoder part with it, and when an LLM microbatch does not
//! fit it packs again with what each sample adds to each LLM stage as additive
//! per-bin caps (`bin_caps`), so no batch it returns can run out of memory.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/stage_slice.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/options.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace dflop {

//! Where a microbatch is fullest, and by how much it misses the budget there.
struct memory_excess {
  double bytes = -std::numeric_limits<double>::infinity();  //!< bytes over the budget (<= 0: fits)
  int stage = 0;                                              //!< stage of the module where it is fullest
  std::int64_t needed = 0;                                    //!< bytes that stage needs
  [[nodiscard]] bool fits() const noexcept { return bytes <= 0; }  //!< within the budget
};

//! Checks microbatches of one layout against a per-GPU memory budget.
template <memory_model Memory>
class memory_cap {
public:
  //! Bytes per sample a second try of the caps leaves unused below each limit:
  //! the memory model may round per microbatch (an integer division by TP), so
  //! a sum of per-sample amounts can fall a few bytes short of a bin's bytes.
  static constexpr double rounding_margin_bytes = 16;

  //! \param memory prices stages  \param layout layer splits, degrees and the schedule's in-flight peaks
  //! \param budget_bytes what one GPU may hold (> 0)
  memory_cap(const Memory& memory, const plan_layout& layout, std::int64_t budget_bytes)
      : memory_(&memory), budget_(budget_bytes) {
    const auto in_flight = peak_activations(layout.schedule);
    std::size_t position = 0;
    for (module_kind kind : all_module_kinds) {
      const module_plan& plan = kind == module_kind::encoder ? layout.encoder : layout.llm;
      auto& stages = kind == module_kind::encoder ? encoder_ : llm_;
      stages.clear();
      for (int s = 0; s < plan.degrees.pp; ++s, ++position) {
        stage_entry entry{plan.degrees.tp, plan.slice(s), static_cast<int>(in_flight[position]),
                          memory_choices_of(plan.degrees), 0};
        entry.fixed = bytes(kind, entry, {});
        stages.push_back(entry);
      }
    }
  }

  //! What one GPU may hold.
  [[nodiscard]] std::int64_t budget() const noexcept { return budget_; }

  //! The fullest stage of `kind` when `microbatch` is its microbatch there.
  [[nodiscard]] memory_excess excess(module_kind kind, std::span<const sample> microbatch) const {
    memory_excess worst;
    const auto& stages = kind == module_kind::encoder ? encoder_ : llm_;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const std::int64_t needed = bytes(kind, stages[s], microbatch);
      const double over = static_cast<double>(needed) - static_cast<double>(budget_);
      if (over > worst.bytes) worst = {over, static_cast<int>(s), needed};
    }
    return worst;
  }

  //! Fills `caps` with one column per LLM stage: what each sample of `batch`
  //! adds to that stage's bytes (its bytes alone less the empty microbatch's),
  //! and the budget less the empty microbatch's bytes (and, with `margin`, the
  //! rounding margin per sample of the batch) as the limit, at least 0. Exact
  //! for a memory model additive over samples.
  void llm_caps(std::span<const sample> batch, bin_caps& caps, bool margin = false) const {
    const std::size_t columns = llm_.size();
    std::vector<double> amounts(batch.size() * columns);
    for (std::size_t i = 0; i < batch.size(); ++i)
      for (std::size_t s = 0; s < columns; ++s)
        amounts[i * columns + s] =
            static_cast<double>(bytes(module_kind::llm, llm_[s], batch.subspan(i, 1)) - llm_[s].fixed);
    caps.amounts = cost_matrix(batch.size(), columns, std::move(amounts));
    caps.limits.resize(columns);
    const double unused = margin ? rounding_margin_bytes * static_cast<double>(batch.size()) : 0.0;
    for (std::size_t s = 0; s < columns; ++s)
      caps.limits[s] =
          std::max(0.0, static_cast<double>(budget_) - static_cast<double>(llm_[s].fixed) - unused);
  }

private:
  struct stage_entry {
    int tp;
    stage_slice slice;
    int in_flight;
    memory_choices choices;
    std::int64_t fixed;  // bytes with an empty microbatch: weights, gradients, optimizer states
  };

  [[nodiscard]] std::int64_t bytes(module_kind kind, const stage_entry& stage,
                                   std::span<const sample> microbatch) const {
    return estimate_memory_with(*memory_, kind, stage.tp, stage.slice, stage.in_flight, microbatch, stage.choices)
        .total();
  }

  const Memory* memory_;
  std::int64_t budget_;
  std::vector<stage_entry> encoder_, llm_;
};

}  // namespace dflop
