// SPDX-License-Identifier: Apache-2.0
//! \file
//! Data-aware activation recomputation: how many of its first layers each
//! stage replica recomputes for each microbatch of one scheduled batch.
//!
//! The plan's recompute count (`module_parallelism::recompute_layers`) is priced
//! the way memory caps are priced: every in-flight microbatch of a stage as
//! heavy as the heaviest. That is safe for any batch but pessimistic twice
//! over: the microbatches a stage really holds at once are those its op list
//! has forwarded and not yet backpropagated (`peak_activations`' rule), in the
//! batch's slot order, and they are rarely all heavy; and a stage only needs to
//! free memory while it holds a heavy set, not for every microbatch. Once a
//! batch is packed and ordered its exact holdings are known, so each
//! (stage replica, microbatch) recomputes only what those holdings need:
//!
//! 1. each forward of the op list is an event, holding a known set of
//!    microbatches; an event over the budget raises, one layer at a time, the
//!    count of the held microbatch whose next layer frees the most bytes, until
//!    it fits (repeated until no event is over, as a first recomputed layer adds
//!    a working set to the events before it);
//! 2. each count is then lowered while every event holding its microbatch
//!    still fits (repeated until none can be), so no single count can drop;
//! 3. the result is kept unless one count for all microbatches (the fewest
//!    that fits, found by bisection) frees fewer bytes in total: the bytes a
//!    recomputed layer frees grow with its tokens, as its forward time does,
//!    so bytes freed stand for the recomputation time added.
//! The plan's count stays the ceiling (it fits by construction), so a batch
//! never recomputes more than the plan said.
//!
//! Exactness needs a memory model whose activations are affine in the number
//! in flight: `in_flight` microbatches like X need `in_flight x kept(X) +
//! working(X)` (kept: what a microbatch stores for its backward; working:
//! what recomputing one needs while it runs), as `analytic_memory_model`
//! counts. The two parts are read off the model at 1 and 2 in flight; a stage
//! holding X1..Xk needs the sum of their kept bytes plus the largest working set.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/op.hpp>
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

  //! The layout's own counts, the same for every replica, microbatch and
  //! batch: what a batch runs without data-aware recomputation.
  static void as_planned(const plan_layout& layout, batch_schedule& out) {
    const auto m = static_cast<std::size_t>(layout.config.microbatches);
    fill_planned(layout.encoder, m, out.encoder_recomputed);
    fill_planned(layout.llm, m, out.llm_recomputed);
  }

  //! Whether `out`'s counts have the sizes `layout` needs (one per replica,
  //! microbatch and stage of each module): false for a batch scheduled without
  //! them, or for another configuration.
  [[nodiscard]] static bool sized_for(const plan_layout& layout, const batch_schedule& out) noexcept {
    const auto entries = [&](const module_parallelism& d) {
      return d.pp <= 0 ? std::size_t{0}
                       : static_cast<std::size_t>(d.dp) * layout.config.microbatches * static_cast<std::size_t>(d.pp);
    };
    return out.encoder_recomputed.size() == entries(layout.config.encoder) &&
           out.llm_recomputed.size() == entries(layout.config.llm);
  }

  //! Sets the counts of `out` (packed, its encoder parts split and its slots
  //! ordered, from `batch`) as the file comment says, within `budget_bytes`
  //! and at most the layout's counts; with `per_microbatch` false, step 3's one
  //! count for all of a stage replica's microbatches (cheaper: what the
  //! planner's scan ranks configurations with). Returns whether some count fell
  //! below the layout's (the batch's costs must then be priced again).
  bool choose(const plan_layout& layout, std::span<const sample> batch, std::int64_t budget_bytes,
              bool per_microbatch, batch_schedule& out) {
    as_planned(layout, out);
    bool lowered = false;
    const auto m = static_cast<std::size_t>(layout.config.microbatches);
    for (module_kind kind : all_module_kinds) {
      const bool encoder = kind == module_kind::encoder;
      const module_plan& plan = encoder ? layout.encoder : layout.llm;
      if (!plan.degrees.recompute || plan.degrees.pp <= 0) continue;
      const auto& microbatches = encoder ? out.encoder_parts : out.llm_microbatches;
      auto& counts = encoder ? out.encoder_recomputed : out.llm_recomputed;
      const auto stages = static_cast<std::size_t>(plan.degrees.pp);
      // Each stage's events (shared by its replicas), then per replica its
      // samples gathered once for all stages: gathering per stage and replica
      // was a quarter of this function's time on the 32B at 1024 GPUs.
      stage_events_.resize(stages);
      bool any = false;
      for (std::size_t s = 0; s < stages; ++s) {
        stage_events_[s].most =
            static_cast<std::uint32_t>(recomputed_layers(plan.degrees, plan.slice(static_cast<int>(s)).layers));
        if (stage_events_[s].most == 0) continue;
        any = true;
        held_events(layout.schedule.rank_ops.at(static_cast<std::size_t>(layout.position(kind, static_cast<int>(s)))),
                    m, stage_events_[s]);
      }
      if (!any) continue;
      for (std::size_t q = 0; q < static_cast<std::size_t>(plan.degrees.dp); ++q) {
        // This replica's microbatch at each execution position.
        samples_.clear();
        first_sample_.assign(1, 0);
        for (std::size_t j = 0; j < m; ++j) {
          for (std::uint32_t i : microbatches[q * m + out.slot_order[j]]) samples_.push_back(batch[i]);
          first_sample_.push_back(samples_.size());
        }
        for (std::size_t s = 0; s < stages; ++s) {
          if (stage_events_[s].most == 0) continue;
          events_ = &stage_events_[s];
          start_stage(kind, plan, plan.slice(static_cast<int>(s)), events_->most);
          choose_counts(budget_bytes, per_microbatch);
          for (std::size_t j = 0; j < m; ++j) {
            std::uint32_t& count = counts[(q * m + out.slot_order[j]) * stages + s];
            if (count_[j] < count) {
              count = count_[j];
              lowered = true;
            }
          }
        }
      }
    }
    return lowered;
  }

private:
  static void fill_planned(const module_plan& plan, std::size_t m, std::vector<std::uint32_t>& counts) {
    const auto stages = static_cast<std::size_t>(std::max(plan.degrees.pp, 0));
    const auto replicas = static_cast<std::size_t>(std::max(plan.degrees.dp, 0));
    counts.assign(replicas * m * stages, 0);
    for (std::size_t s = 0; s < stages; ++s) {
      const auto count =
          static_cast<std::uint32_t>(recomputed_layers(plan.degrees, plan.slice(static_cast<int>(s)).layers));
      for (std::size_t row = 0; row < replicas * m; ++row) counts[row * stages + s] = count;
    }
  }

  // One stage's op list as events: the microbatches held at each forward, and
  // the events holding each microbatch; shared by the stage's replicas.
  struct op_events {
    std::uint32_t most = 0;  // the stage's recomputable layers (0: no events kept)
    std::vector<std::size_t> first, of_first;  // where event e's members / microbatch j's events begin
    std::vector<std::uint32_t> members, of;    // held microbatches per event, events per microbatch
  };

  // Fills `out` with the events of `ops` (see op_events).
  static void held_events(const std::vector<pipeline_op>& ops, std::size_t m, op_events& out) {
    out.first.assign(1, 0);
    out.members.clear();
    std::vector<std::uint32_t> held;
    for (const pipeline_op& op : ops) {
      if (op.kind == op_kind::forward) {
        held.push_back(op.microbatch);
        out.members.insert(out.members.end(), held.begin(), held.end());
        out.first.push_back(out.members.size());
      } else if (op.kind == op_kind::backward) {
        const auto at = std::find(held.begin(), held.end(), op.microbatch);
        if (at != held.end()) held.erase(at);
      }
    }
    std::vector<std::size_t> per(m + 1, 0);
    for (std::uint32_t j : out.members) ++per[j + 1];
    for (std::size_t j = 0; j < m; ++j) per[j + 1] += per[j];
    out.of_first = per;
    out.of.assign(out.members.size(), 0);
    for (std::size_t e = 0; e + 1 < out.first.size(); ++e)
      for (std::size_t at = out.first[e]; at < out.first[e + 1]; ++at)
        out.of[per[out.members[at]]++] = static_cast<std::uint32_t>(e);
  }

  // Per (stage, replica): fixed bytes and an empty memo of kept / working bytes.
  void start_stage(module_kind kind, const module_plan& plan, stage_slice slice, std::uint32_t most) {
    kind_ = kind;
    plan_ = &plan;
    slice_ = slice;
    most_ = most;
    const std::size_t m = first_sample_.size() - 1;
    kept_.assign(m * (most + 1), unknown);
    working_.assign(m * (most + 1), 0);
    // Weights, gradients and optimizer states: the larger of recomputing none and the plan's count.
    fixed_ = std::min(most_bytes,
                      std::max(estimate_memory_with(*memory_, kind, plan.degrees.tp, slice, 0, {}, choices(0)).total(),
                               estimate_memory_with(*memory_, kind, plan.degrees.tp, slice, 0, {}, choices(most)).total()));
    count_.assign(m, 0);
  }

  [[nodiscard]] memory_choices choices(std::uint32_t recomputed) const {
    memory_choices out = memory_choices_of(plan_->degrees);
    out.recompute_activations = recomputed > 0;
    out.recompute_layers = recomputed;
    return out;
  }

  static constexpr std::int64_t unknown = -1;
  static constexpr std::int64_t most_bytes = std::int64_t{1} << 48;

  // Microbatch j's kept and working bytes with r recomputed layers (memoised).
  void price(std::size_t j, std::uint32_t r) {
    const std::size_t at = j * (most_ + 1) + r;
    if (kept_[at] != unknown) return;
    const std::span<const sample> mb(samples_.data() + first_sample_[j], first_sample_[j + 1] - first_sample_[j]);
    if (mb.empty()) {
      kept_[at] = 0;
      return;
    }
    const int tp = plan_->degrees.tp;
    const std::int64_t one = estimate_memory_with(*memory_, kind_, tp, slice_, 1, mb, choices(r)).activations;
    const std::int64_t two = estimate_memory_with(*memory_, kind_, tp, slice_, 2, mb, choices(r)).activations;
    // Clamped (a microbatch of 256 TiB fits nowhere): sums over an event cannot overflow.
    kept_[at] = std::clamp<std::int64_t>(two - one, 0, most_bytes);
    working_[at] = std::clamp<std::int64_t>(2 * one - two, 0, most_bytes);
  }
  std::int64_t kept(std::size_t j, std::uint32_t r) {
    price(j, r);
    return kept_[j * (most_ + 1) + r];
  }
  std::int64_t working(std::size_t j, std::uint32_t r) {
    price(j, r);
    return working_[j * (most_ + 1) + r];
  }

  // Bytes at event e with count r for every microbatch.
  std::int64_t uniform_bytes(std::size_t e, std::uint32_t r) {
    std::int64_t total = fixed_, largest = 0;
    for (std::size_t at = events_->first[e]; at < events_->first[e + 1]; ++at) {
      const std::uint32_t j = events_->members[at];
      total += kept(j, r);
      largest = std::max(largest, working(j, r));
    }
    return total + largest;
  }
  [[nodiscard]] std::size_t events() const noexcept { return events_->first.size() - 1; }

  bool uniform_fits(std::uint32_t r, std::int64_t budget) {
    for (std::size_t e = 0; e < events(); ++e)
      if (uniform_bytes(e, r) > budget) return false;
    return true;
  }

  // The fewest count in [0, most] with which `fits` holds (`most` when none
  // below it does). 0 is tried alone: recomputing none keeps no working set,
  // while from 1 up the bytes only fall as the count grows, so bisection holds.
  template <class Fits>
  static std::uint32_t fewest_fitting(std::uint32_t most, Fits&& fits) {
    if (fits(0u)) return 0;
    std::uint32_t low = 1, high = most;
    while (low < high) {
      const std::uint32_t mid = low + (high - low) / 2;
      if (fits(mid)) high = mid;
      else low = mid + 1;
    }
    return high;
  }

  // The fewest count for all microbatches that fits (`most_` when none below it does).
  std::uint32_t fewest_uniform(std::int64_t budget) {
    return fewest_fitting(most_, [&](std::uint32_t r) { return uniform_fits(r, budget); });
  }

  // Steps 1-3 of the file comment, into `count_` (with `per_microbatch` false: the fewest count for all).
  void choose_counts(std::int64_t budget, bool per_microbatch) {
    const std::size_t m = count_.size();
    const std::uint32_t uniform = fewest_uniform(budget);
    if (uniform == 0) return;  // count_ is all 0
    if (!per_microbatch) {
      std::fill(count_.begin(), count_.end(), uniform);
      return;
    }
    start_events();
    bool fits = true;
    for (bool raised = true; raised && fits;) {
      raised = false;
      for (std::size_t e = 0; e < events() && fits; ++e)
        while (bytes(e) > budget) {
          std::size_t best = m;
          std::int64_t freed = 0;
          for (std::size_t at = events_->first[e]; at < events_->first[e + 1]; ++at) {
            const std::uint32_t j = events_->members[at];
            if (count_[j] >= most_) continue;
            const std::int64_t gain = kept(j, count_[j]) - kept(j, count_[j] + 1);
            if (best == m || gain > freed) best = j, freed = gain;
          }
          if (best == m) {
            fits = false;
            break;
          }
          set_count(best, count_[best] + 1);
          raised = true;
        }
    }
    if (fits) lower_counts(budget);
    std::int64_t freed = 0, freed_uniform = 0;
    for (std::size_t j = 0; j < m && fits; ++j) {
      freed += kept(j, 0) - kept(j, count_[j]);
      freed_uniform += kept(j, 0) - kept(j, uniform);
    }
    if (!fits || freed_uniform < freed) std::fill(count_.begin(), count_.end(), uniform);
  }

  // Lowers each count to the fewest with which every event holding its
  // microbatch fits, until none can drop.
  void lower_counts(std::int64_t budget) {
    const auto holds = [&](std::size_t j, std::uint32_t r) {
      for (std::size_t at = events_->of_first[j]; at < events_->of_first[j + 1]; ++at)
        if (bytes_if(events_->of[at], j, r) > budget) return false;
      return true;
    };
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (std::size_t j = 0; j < count_.size(); ++j) {
        if (count_[j] == 0) continue;
        const std::uint32_t fewest = fewest_fitting(count_[j], [&](std::uint32_t r) { return holds(j, r); });
        if (fewest < count_[j]) {
          set_count(j, fewest);
          dropped = true;
        }
      }
    }
  }

  // Per-event sums of kept bytes and the two largest working sets (with whose
  // they are) for `count_`, so that an event's bytes, and its bytes with one
  // count changed, cost O(1).
  void start_events() {
    kept_sum_.assign(events(), 0);
    top_.assign(events(), {});
    for (std::size_t e = 0; e < events(); ++e) {
      for (std::size_t at = events_->first[e]; at < events_->first[e + 1]; ++at)
        kept_sum_[e] += kept(events_->members[at], count_[events_->members[at]]);
      refresh_top(e);
    }
  }
  void refresh_top(std::size_t e) {
    event_top top;
    for (std::size_t at = events_->first[e]; at < events_->first[e + 1]; ++at) {
      const std::uint32_t j = events_->members[at];
      const std::int64_t w = working(j, count_[j]);
      if (w > top.first) {
        top.second = top.first;
        top.second_of = top.first_of;
        top.first = w;
        top.first_of = j;
      } else if (w > top.second) {
        top.second = w;
        top.second_of = j;
      }
    }
    top_[e] = top;
  }
  [[nodiscard]] std::int64_t bytes(std::size_t e) const { return fixed_ + kept_sum_[e] + top_[e].first; }
  // Event e's bytes were microbatch j's count r.
  std::int64_t bytes_if(std::size_t e, std::size_t j, std::uint32_t r) {
    const event_top& top = top_[e];
    const std::int64_t others = top.first_of == j ? top.second : top.first;
    return fixed_ + kept_sum_[e] - kept(j, count_[j]) + kept(j, r) + std::max(others, working(j, r));
  }
  void set_count(std::size_t j, std::uint32_t r) {
    const std::int64_t kept_change = kept(j, r) - kept(j, count_[j]);
    const std::int64_t new_working = working(j, r);
    count_[j] = r;
    for (std::size_t at = events_->of_first[j]; at < events_->of_first[j + 1]; ++at) {
      const std::uint32_t e = events_->of[at];
      kept_sum_[e] += kept_change;
      const event_top& top = top_[e];
      if (top.first_of == j || top.second_of == j || new_working > top.second) refresh_top(e);
    }
  }

  const Memory* memory_;
  // The stage replica being chosen for.
  module_kind kind_ = module_kind::llm;
  const module_plan* plan_ = nullptr;
  stage_slice slice_{};
  std::uint32_t most_ = 0;
  std::int64_t fixed_ = 0;
  std::vector<sample> samples_;           // its microbatches' samples, by execution position
  std::vector<std::size_t> first_sample_; // where microbatch j's begin in samples_
  std::vector<std::int64_t> kept_, working_;  // memo, [j * (most_ + 1) + r]
  std::vector<std::uint32_t> count_;          // by execution position
  // Per event, for `count_`: kept bytes summed, and the two largest working sets.
  struct event_top {
    std::int64_t first = 0, second = 0;
    std::size_t first_of = SIZE_MAX, second_of = SIZE_MAX;
  };
  std::vector<std::int64_t> kept_sum_;
  std::vector<event_top> top_;
  std::vector<op_events> stage_events_;  // per stage of the module being chosen for
  const op_events* events_ = nullptr;     // the stage being chosen for
};

}  // namespace dflop
