// SPDX-License-Identifier: Apache-2.0
//! \file
//! Turns one global batch into a `batch_schedule` for a fixed layout: price each
//! sample, pack into (LLM replica x microbatch) bins, group the bins into slots,
//! split each slot's encoder work over the encoder replicas, price every op,
//! order the slots and simulate. The planner scores configurations with it and
//! the runtime calls it once per iteration, so what is predicted is what runs.
//!
//! A layout whose encoder has `pp == 0` has no encoder (as in `world_layout`): an
//! LLM-only pipeline. Its samples are priced and packed on the LLM alone (the cost
//! model is never asked about an encoder), and its schedules have no encoder
//! parts, encoder costs or hand-offs: what the multimodal executor runs LLM-only.
//!
//! With a memory budget (`batch_options::memory_budget_bytes`) no microbatch it
//! returns needs more than the budget on any stage (see memory_cap.hpp): an LLM
//! bin over it makes the packer pack again with memory as per-bin caps, an
//! encoder part over it makes that slot's split place each sample where it
//! fits, and a batch that cannot be made to fit raises `memory_cap_error`
//! naming its samples.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/batch_recompute.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/memory_cap.hpp>
#include <dflop/plan/pack/cost_matrix.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/rank_layout.hpp>
#include <dflop/sim/multimodal.hpp>
#include <dflop/sim/order.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Schedules global batches for one layout. Holds reusable scratch: one per thread.
template <cost_model Cost, memory_model Memory, packer Packer>
class batch_scheduler {
public:
  //! \param model the shapes  \param cluster placement and links  \param cost prices microbatches
  //! \param memory prices gradient bytes per stage  \param pack_policy the packer
  batch_scheduler(const multimodal_spec& model, const cluster_spec& cluster, const Cost& cost, const Memory& memory,
                  Packer pack_policy = {})
      : model_(&model), cluster_(&cluster), cost_(&cost), memory_(&memory), packer_(std::move(pack_policy)),
        recompute_(memory) {}

  //! Schedules `batch` (at least `layout.config.bins()` samples) into `out`, reusing its memory.
  void schedule(const plan_layout& layout, std::span<const sample> batch, const batch_options& options,
                batch_schedule& out) {
    const parallel_config& config = layout.config;
    const auto bins = static_cast<std::size_t>(config.bins());
    if (batch.size() < bins)
      throw input_error("global batch", 0,
                        std::to_string(batch.size()) + " samples cannot fill " + std::to_string(bins) +
                            " microbatches (LLM replicas x microbatches); every microbatch needs a sample");
    out.config = config;
    start_batch(layout, options);
    price_samples(layout, batch);
    pack_bins(batch, bins, options);
    if (options.assignment != slot_assignment::best_simulated) {
      if (!finish(layout, batch, options, options.assignment, out)) throw_encoder_failure();
      return;
    }
    // Both rules, each ordered and simulated; the faster one is kept. Neither
    // dominates: even encoder slots shorten the encoder's critical work, while
    // slots without encoder work let LLM replicas run without waiting on it.
    // The costly NEH order is spent on the rule that wins with Johnson's order
    // only (NEH starts from Johnson's order, so it can only improve on it).
    // Under a memory budget a rule whose encoder parts cannot fit is out; once
    // one rule fits, the other is not repaired (re-split, slots traded) to fit.
    batch_options screening = options;
    if (options.order == order_policy::neh) screening.order = order_policy::johnson;
    // Likewise recompute counts per microbatch are chosen for the winning rule
    // only; the rules are ranked with one count per stage replica.
    if (options.recompute_per_batch && options.memory_budget_bytes > 0) screening.recompute_per_microbatch = false;
    const bool balanced_fits = finish(layout, batch, screening, slot_assignment::balanced, out);
    const bool round_robin_fits =
        finish(layout, batch, screening, slot_assignment::round_robin, alternative_, /*repair=*/!balanced_fits);
    if (!balanced_fits && !round_robin_fits) throw_encoder_failure();
    const bool round_robin_wins =
        round_robin_fits && (!balanced_fits || alternative_.predicted_seconds < out.predicted_seconds);
    if (!(screening == options))
      finish(layout, batch, options, round_robin_wins ? slot_assignment::round_robin : slot_assignment::balanced, out);
    else if (round_robin_wins)
      std::swap(out, alternative_);
  }

  //! Packs `batch` and assigns its microbatches (LLM bins and encoder parts)
  //! without pricing ops or simulating: enough to check memory before paying
  //! for a simulation. `options.assignment` names one rule (not `best_simulated`).
  void assign_only(const plan_layout& layout, std::span<const sample> batch, const batch_options& options,
                   batch_schedule& out) {
    if (options.assignment == slot_assignment::best_simulated)
      throw error("assign_only: best_simulated needs simulations; name one assignment rule");
    out.config = layout.config;
    start_batch(layout, options);
    price_samples(layout, batch);
    pack_bins(batch, static_cast<std::size_t>(layout.config.bins()), options);
    assign_slots(layout.config, options.assignment, out);
    if (!split_encoder_work(layout.config, batch, out)) throw_encoder_failure();
    batch_recompute<Memory>::as_planned(layout, out);
  }

  //! Prices and simulates `out` as it stands (its microbatches, encoder parts and
  //! slot order kept) with this scheduler's cost model and cluster: what a batch
  //! scheduled earlier takes under a refined model or other links. `out` must have
  //! been scheduled for `layout` from `batch`; `options` gives the weight-gradient
  //! share. Its recompute counts are kept (the layout's when it has none). Sets
  //! `out.costs` and `out.predicted_seconds`. Throws `input_error` when `out` was
  //! scheduled for another configuration.
  void reprice(const plan_layout& layout, std::span<const sample> batch, const batch_options& options,
               batch_schedule& out) {
    if (out.config != layout.config) {
      std::ostringstream text;
      text << "reprice: the batch was scheduled for " << out.config << ", the layout is " << layout.config;
      throw input_error("batch_schedule", 0, text.str());
    }
    if (!batch_recompute<Memory>::sized_for(layout, out)) batch_recompute<Memory>::as_planned(layout, out);
    fill_costs(layout, batch, options, out);
    simulator_.simulate(layout.schedule, out.costs, result_, out.slot_order);
    out.predicted_seconds = result_.makespan;
  }

  //! Convenience: a fresh `batch_schedule`.
  [[nodiscard]] batch_schedule schedule(const plan_layout& layout, std::span<const sample> batch,
                                        const batch_options& options) {
    batch_schedule out;
    schedule(layout, batch, options, out);
    return out;
  }

  //! Slots x pipeline ranks (dp x pp of both modules) above which an NEH slot
  //! order whose budget is below the slot count is replaced by Johnson's
  //! order. Between the scale benchmark's 256-GPU plans (at most about 23,000)
  //! and its 1024-GPU ones (65,000 and more).
  static constexpr std::int64_t large_order_search = 40'000;

  //! Slots x pipeline ranks of `config`: what one simulation of its batch walks.
  [[nodiscard]] static constexpr std::int64_t order_search_size(const parallel_config& config) noexcept {
    const std::int64_t ranks = std::int64_t{config.llm.dp} * config.llm.pp +
                               (config.has_encoder() ? std::int64_t{config.encoder.dp} * config.encoder.pp : 0);
    return std::int64_t{config.microbatches} * ranks;
  }

private:
  // Assigns, splits, prices, orders and simulates; false (nothing priced) when
  // the encoder parts of this assignment cannot fit the memory budget. With
  // data-aware recomputation the ordered batch's counts are lowered where what
  // its stages really hold allows, and it is priced and simulated again in its
  // order (fewer recomputed layers only shorten backward ops), then ordered
  // once more with those costs; the faster of the two is kept.
  bool finish(const plan_layout& layout, std::span<const sample> batch, const batch_options& requested,
              slot_assignment assignment, batch_schedule& out, bool repair = true) {
    const batch_options options = affordable_order(requested, layout.config);
    out.config = layout.config;
    assign_slots(layout.config, assignment, out);
    if (!split_encoder_work(layout.config, batch, out, repair)) return false;
    batch_recompute<Memory>::as_planned(layout, out);
    fill_costs(layout, batch, options, out);
    order_and_simulate(layout, options, out);
    if (options.recompute_per_batch && cap_ && choose_recompute(layout, batch, options, out) &&
        options.recompute_per_microbatch && options.order != order_policy::identity) {
      // The order was chosen with the plan's counts. Ordered again with the
      // lowered costs, the batch gets other holdings and so other counts: the
      // faster of the two is kept (video-heavy: 1.189x -> 1.201x over the
      // reference). Part of the per-microbatch refinement: the planner's scan,
      // with one count per stage replica, does not pay for it.
      reordered_ = out;
      batch_options again = options;
      again.order_budget = options.order_budget / 4;  // a quarter of the first search: most of the gain, at a quarter of the cost
      order_and_simulate(layout, again, reordered_);
      choose_recompute(layout, batch, options, reordered_);
      if (reordered_.predicted_seconds < out.predicted_seconds) std::swap(out, reordered_);
    }
    return true;
  }

  // `options` with Johnson's order in place of an NEH search that cannot try
  // one slot at every position (more slots than budget) on a large batch
  // (`large_order_search`). There the search only tried the heaviest slot at
  // the first positions and found nothing Johnson's order did not, for most
  // of the planner's finalist time; on smaller batches it found up to 2%
  // (docs/benchmarks.md).
  [[nodiscard]] static batch_options affordable_order(const batch_options& options, const parallel_config& config) {
    batch_options out = options;
    if (out.order == order_policy::neh && static_cast<std::size_t>(config.microbatches) > out.order_budget &&
        order_search_size(config) > large_order_search)
      out.order = order_policy::johnson;
    return out;
  }

  // Data-aware recompute counts for `out` in its order (see batch_recompute.hpp),
  // priced and simulated; false (nothing changed) when none fell below the layout's.
  bool choose_recompute(const plan_layout& layout, std::span<const sample> batch, const batch_options& options,
                        batch_schedule& out) {
    if (!recompute_.choose(layout, batch, cap_->budget(), options.recompute_per_microbatch, out)) return false;
    fill_costs(layout, batch, options, out);
    simulator_.simulate(layout.schedule, out.costs, result_, out.slot_order);
    out.predicted_seconds = result_.makespan;
    return true;
  }

  // Per batch: the memory cap of this layout (none without a budget), no failure yet.
  void start_batch(const plan_layout& layout, const batch_options& options) {
    if (options.memory_budget_bytes < 0)
      throw input_error("memory_budget_bytes", 0,
                        "must be >= 0 (0: no cap), got " + std::to_string(options.memory_budget_bytes));
    if (!(options.gradient_bucket_bytes >= 0) || !std::isfinite(options.gradient_bucket_bytes))
      throw input_error("gradient_bucket_bytes", 0,
                        "must be finite and >= 0 (0: one all-reduce after the last op), got " +
                            std::to_string(options.gradient_bucket_bytes));
    cap_.reset();
    if (options.memory_budget_bytes > 0) cap_.emplace(*memory_, layout, options.memory_budget_bytes);
    encoder_failure_.reset();
    config_ = layout.config;
  }

  // The configuration in words, for messages.
  [[nodiscard]] std::string config_text() const {
    std::ostringstream text;
    text << config_;
    return text.str();
  }

  // Per-sample 2-D costs in comparable units: a bin's LLM stage time, and its
  // share of the encoder stage time of its slot (a slot's encoder work for all
  // llm.dp bins is spread over encoder.dp replicas). Without an encoder the
  // encoder column is 0: the packer balances the LLM alone.
  void price_samples(const plan_layout& layout, std::span<const sample> batch) {
    const parallel_config& c = layout.config;
    const bool encoder = c.has_encoder();
    const double encoder_scale = encoder ? static_cast<double>(c.llm.dp) / (c.encoder.dp * c.encoder.pp) : 0.0;
    encoder_cost_.resize(batch.size());
    sample_costs_.resize(batch.size() * 2);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::span<const sample> one(&batch[i], 1);
      encoder_cost_[i] =
          encoder ? cost_->estimate_time(module_kind::encoder, c.encoder.tp, one).whole(layout.encoder.layers()).total()
                  : 0.0;
      const double llm = cost_->estimate_time(module_kind::llm, c.llm.tp, one).whole(layout.llm.layers()).total();
      sample_costs_[2 * i] = encoder_cost_[i] * encoder_scale;
      sample_costs_[2 * i + 1] = llm / c.llm.pp;
    }
  }

  void pack_bins(std::span<const sample> batch, std::size_t bins, const batch_options& options) {
    const std::size_t samples = sample_costs_.size() / 2;
    matrix_ = cost_matrix(samples, 2, std::move(sample_costs_));
    pack_options pack_settings;
    pack_settings.seed = options.seed;
    packer_.pack(matrix_, bins, pack_settings, workspace_, packing_);
    llm_capped_ = false;
    if (cap_ && !llm_bins_fit(batch)) {
      // Rare (a tail batch): pack again with memory as per-bin caps.
      repack_within_cap(batch, bins, pack_settings);
      llm_capped_ = true;
    }
    sample_costs_ = std::move(matrix_).release_values();
  }

  // Whether every LLM bin fits the cap; notes the bins that do not in `over_bins_`.
  bool llm_bins_fit(std::span<const sample> batch) {
    over_bins_.clear();
    worst_excess_ = memory_excess{};
    for (std::size_t bin = 0; bin < packing_.bin_count(); ++bin) {
      gathered_.clear();
      for (std::size_t i : packing_.bin(bin)) gathered_.push_back(batch[i]);
      const memory_excess excess = cap_->excess(module_kind::llm, gathered_);
      if (excess.fits()) continue;
      over_bins_.push_back(bin);
      if (excess.bytes > worst_excess_.bytes) worst_excess_ = excess;
    }
    return over_bins_.empty();
  }

  // Packs again with each sample's bytes per LLM stage as additive caps. Throws
  // `memory_cap_error` naming the samples: those that cannot fit even alone, or
  // those of the bins over the budget when no packing within the caps is found.
  void repack_within_cap(std::span<const sample> batch, std::size_t bins, pack_options settings) {
    // The over-budget bins' samples, heaviest first: what an error names.
    std::vector<std::uint32_t> involved;
    for (std::size_t bin : over_bins_)
      for (std::size_t i : packing_.bin(bin)) involved.push_back(static_cast<std::uint32_t>(i));
    std::stable_sort(involved.begin(), involved.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return batch[a].llm_tokens > batch[b].llm_tokens; });
    const memory_excess uncapped = worst_excess_;

    std::vector<std::uint32_t> alone;
    memory_excess alone_worst;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const memory_excess excess = cap_->excess(module_kind::llm, batch.subspan(i, 1));
      if (excess.fits()) continue;
      alone.push_back(static_cast<std::uint32_t>(i));
      if (excess.bytes > alone_worst.bytes) alone_worst = excess;
    }
    if (!alone.empty())
      throw cap_error(batch, alone, alone_worst, module_kind::llm,
                      " cannot fit in memory even alone in an LLM microbatch of " + config_text());

    // Exact caps first; if the model's rounding leaves a bin a few bytes over,
    // caps with a margin per sample.
    for (const bool margin : {false, true}) {
      cap_->llm_caps(batch, caps_, margin);
      settings.caps = &caps_;
      try {
        packer_.pack(matrix_, bins, settings, workspace_, packing_);
      } catch (const infeasible_error&) {
        throw cap_error(batch, involved, uncapped, module_kind::llm,
                        " fill LLM microbatches over the memory budget, and " + std::string(packer_.name()) +
                            " found no packing of the batch into " + std::to_string(bins) +
                            " microbatches that keeps every one within it (" + config_text() + ")");
      }
      if (llm_bins_fit(batch)) return;
    }
    throw cap_error(batch, involved, worst_excess_, module_kind::llm,
                    " fill LLM microbatches over the memory budget, and packing them with each sample's bytes "
                    "as additive caps did not bring every microbatch within it: the memory model is not "
                    "additive over samples (" + config_text() + ")");
  }

  // A `memory_cap_error` naming the first ten of `samples` (indices into `batch`) and the stage.
  memory_cap_error cap_error(std::span<const sample> batch, std::span<const std::uint32_t> samples,
                             const memory_excess& excess, module_kind kind, const std::string& what) const {
    std::vector<std::string> ids;
    std::string text = std::to_string(samples.size()) + " sample" + (samples.size() == 1 ? "" : "s") + " (";
    for (std::size_t k = 0; k < samples.size(); ++k) {
      const sample& s = batch[samples[k]];
      ids.push_back(s.id);
      if (k < 10)
        text += (k > 0 ? ", " : "") + s.id + ": " + std::to_string(s.encoder_tokens) + " encoder, " +
                std::to_string(s.llm_tokens) + " LLM tokens";
    }
    if (samples.size() > 10) text += ", and " + std::to_string(samples.size() - 10) + " more";
    text += ")" + what + "; the fullest, " + std::string(to_string(kind)) + " stage " + std::to_string(excess.stage) +
            ", needs " + gib_text(static_cast<double>(excess.needed)) + " GiB of a " +
            gib_text(static_cast<double>(cap_->budget())) + " GiB budget per GPU";
    return memory_cap_error(text, std::move(ids), excess.bytes);
  }

  static std::string gib_text(double bytes) {
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(2);
    text << bytes / (1 << 30);
    return text.str();
  }

  [[noreturn]] void throw_encoder_failure() const {
    if (encoder_failure_) throw *encoder_failure_;
    throw error("batch_scheduler: an encoder split failed without a recorded reason");
  }

  void assign_slots(const parallel_config& c, slot_assignment assignment, batch_schedule& out) {
    const auto m = static_cast<std::size_t>(c.microbatches);
    const auto replicas = static_cast<std::size_t>(c.llm.dp);
    const std::size_t bins = m * replicas;
    out.llm_microbatches.resize(bins);
    bin_target_.resize(bins);
    if (assignment == slot_assignment::round_robin) {
      for (std::size_t bin = 0; bin < bins; ++bin) bin_target_[bin] = (bin % replicas) * m + bin / replicas;
    } else {
      // Slots: heaviest encoder bins first, each to the slot with the least encoder work that has room.
      bin_encoder_.assign(bins, 0.0);
      bin_llm_.assign(bins, 0.0);
      for (std::size_t i = 0; i < packing_.bin_of.size(); ++i) {
        bin_encoder_[packing_.bin_of[i]] += sample_costs_[2 * i];
        bin_llm_[packing_.bin_of[i]] += sample_costs_[2 * i + 1];
      }
      order_.resize(bins);
      std::iota(order_.begin(), order_.end(), 0U);
      std::stable_sort(order_.begin(), order_.end(),
                       [&](std::uint32_t a, std::uint32_t b) { return bin_encoder_[a] > bin_encoder_[b]; });
      // The open slots as (encoder work, slot) in a min-heap: the least-loaded
      // slot, lowest index among equals, in log m rather than m per bin.
      open_slots_.clear();
      for (std::size_t k = 0; k < m; ++k) open_slots_.emplace_back(0.0, k);
      slot_fill_.assign(m, 0);
      slot_of_bin_.resize(bins);
      for (std::uint32_t bin : order_) {
        std::pop_heap(open_slots_.begin(), open_slots_.end(), std::greater<>{});
        auto& [load, best] = open_slots_.back();
        slot_of_bin_[bin] = static_cast<std::uint32_t>(best);
        load += bin_encoder_[bin];
        if (++slot_fill_[best] < replicas)
          std::push_heap(open_slots_.begin(), open_slots_.end(), std::greater<>{});
        else
          open_slots_.pop_back();
      }
      // Each slot's bins in index order (every slot holds `replicas` of them).
      bins_by_slot_.resize(bins);
      std::fill(slot_fill_.begin(), slot_fill_.end(), 0);
      for (std::uint32_t bin = 0; bin < bins; ++bin) {
        const std::size_t k = slot_of_bin_[bin];
        bins_by_slot_[k * replicas + slot_fill_[k]++] = bin;
      }
      // Replicas: within each slot, the heaviest LLM bin to the replica with the least LLM work so far.
      replica_load_.assign(replicas, 0.0);
      for (std::size_t k = 0; k < m; ++k) {
        slot_bins_.assign(bins_by_slot_.begin() + static_cast<std::ptrdiff_t>(k * replicas),
                          bins_by_slot_.begin() + static_cast<std::ptrdiff_t>((k + 1) * replicas));
        std::stable_sort(slot_bins_.begin(), slot_bins_.end(),
                         [&](std::uint32_t a, std::uint32_t b) { return bin_llm_[a] > bin_llm_[b]; });
        replica_taken_.assign(replicas, 0);
        for (std::uint32_t bin : slot_bins_) {
          std::size_t best = replicas;
          for (std::size_t r = 0; r < replicas; ++r)
            if (!replica_taken_[r] && (best == replicas || replica_load_[r] < replica_load_[best])) best = r;
          replica_taken_[best] = 1;
          replica_load_[best] += bin_llm_[bin];
          bin_target_[bin] = best * m + k;
        }
      }
    }
    for (std::size_t bin = 0; bin < bins; ++bin) {
      auto& members = out.llm_microbatches[bin_target_[bin]];
      const auto samples = packing_.bin(bin);
      members.assign(samples.begin(), samples.end());
    }
    out.packing_makespan = packing_.makespan;
    out.packing_lower_bound = packing_.lower_bound;
    out.memory_capped = llm_capped_;
  }

  // Each slot's samples with encoder work, heaviest first, to the least-loaded
  // encoder replica. Without an encoder there are no parts (zero encoder replicas).
  // Under a memory cap a slot with a part over it is split again, each sample to
  // the least-loaded replica where it still fits; when some sample fits on none,
  // one of the slot's LLM microbatches trades slots with one of the same replica
  // (lightest encoder work first) so that both slots fit. False (the failure
  // recorded) when no such trade is found, or at the first slot over the cap
  // when not asked to `repair`.
  bool split_encoder_work(const parallel_config& c, std::span<const sample> batch, batch_schedule& out,
                          bool repair = true) {
    const auto m = static_cast<std::size_t>(c.microbatches);
    const auto encoder_replicas = c.has_encoder() ? static_cast<std::size_t>(c.encoder.dp) : 0;
    out.encoder_parts.resize(encoder_replicas * m);
    if (encoder_replicas == 0) return true;
    for (auto& part : out.encoder_parts) part.clear();
    encoder_load_.resize(encoder_replicas);
    std::optional<memory_cap_error> first_failure;
    for (std::size_t k = 0; k < m; ++k) {
      if (split_slot(c, batch, k, out, repair)) continue;
      if (!repair) return false;
      if (!first_failure) first_failure = slot_error(batch, encoder_replicas);
      if (!trade_for_fit(c, batch, k, out)) {
        encoder_failure_ = std::move(first_failure);
        return false;
      }
    }
    return true;
  }

  // Splits slot k's encoder samples over the encoder replicas (see split_encoder_work).
  bool split_slot(const parallel_config& c, std::span<const sample> batch, std::size_t k, batch_schedule& out,
                  bool repair = true) {
    const auto m = static_cast<std::size_t>(c.microbatches);
    const auto replicas = static_cast<std::size_t>(c.encoder.dp);
    slot_samples_.clear();
    for (std::size_t r = 0; r < static_cast<std::size_t>(c.llm.dp); ++r)
      for (std::uint32_t i : out.llm_microbatches[r * m + k])
        if (encoder_cost_[i] > 0) slot_samples_.push_back(i);
    std::stable_sort(slot_samples_.begin(), slot_samples_.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return encoder_cost_[a] > encoder_cost_[b]; });
    for (std::size_t e = 0; e < replicas; ++e) out.encoder_parts[e * m + k].clear();
    std::fill(encoder_load_.begin(), encoder_load_.end(), 0.0);
    for (std::uint32_t i : slot_samples_) {
      const auto lightest = static_cast<std::size_t>(
          std::min_element(encoder_load_.begin(), encoder_load_.end()) - encoder_load_.begin());
      encoder_load_[lightest] += encoder_cost_[i];
      out.encoder_parts[lightest * m + k].push_back(i);
    }
    if (cap_ && !encoder_slot_fits(batch, replicas, m, k, out)) {
      if (!repair || !split_slot_within_cap(batch, replicas, m, k, out)) return false;
      out.memory_capped = true;
    }
    for (std::size_t e = 0; e < replicas; ++e)
      std::sort(out.encoder_parts[e * m + k].begin(), out.encoder_parts[e * m + k].end());
    return true;
  }

  // Slot k cannot be split within the cap: trade one of its LLM microbatches
  // (most encoder work first) with the same replica's microbatch of another slot
  // (least encoder work first) until both slots split within it. The trade
  // keeps each replica's microbatches, only their slots change.
  bool trade_for_fit(const parallel_config& c, std::span<const sample> batch, std::size_t k, batch_schedule& out) {
    const auto m = static_cast<std::size_t>(c.microbatches);
    const auto replicas = static_cast<std::size_t>(c.llm.dp);
    const auto encoder_replicas = static_cast<std::size_t>(c.encoder.dp);
    other_parts_.resize(encoder_replicas);
    const auto encoder_work = [&](const std::vector<std::uint32_t>& members) {
      double work = 0;
      for (std::uint32_t i : members) work += encoder_cost_[i];
      return work;
    };
    std::vector<std::size_t> own(replicas), others;
    std::iota(own.begin(), own.end(), std::size_t{0});
    std::stable_sort(own.begin(), own.end(), [&](std::size_t a, std::size_t b) {
      return encoder_work(out.llm_microbatches[a * m + k]) > encoder_work(out.llm_microbatches[b * m + k]);
    });
    std::vector<double> slot_work(m, 0.0);
    for (std::size_t slot = 0; slot < m; ++slot)
      for (std::size_t r = 0; r < replicas; ++r) slot_work[slot] += encoder_work(out.llm_microbatches[r * m + slot]);
    for (std::size_t slot = 0; slot < m; ++slot)
      if (slot != k) others.push_back(slot);
    std::stable_sort(others.begin(), others.end(),
                     [&](std::size_t a, std::size_t b) { return slot_work[a] < slot_work[b]; });
    // Of the two slots, the one that has failed more often in this search is
    // split first (slot `other` on a tie): both must split, so the order only
    // changes the work. On the 70B at 1024 GPUs slot `other` failed in 997 of
    // 1000 tries where slot k fit; on the 7B mostly slot k failed.
    std::size_t k_failures = 0, other_failures = 0;
    for (std::size_t r : own)
      for (std::size_t other : others) {
        std::swap(out.llm_microbatches[r * m + k], out.llm_microbatches[r * m + other]);
        // Slot `other`'s parts kept aside and copied back if the trade fails:
        // what splitting its old microbatches gave (slot k is split again anyway).
        for (std::size_t e = 0; e < encoder_replicas; ++e) other_parts_[e] = out.encoder_parts[e * m + other];
        const bool other_first = other_failures >= k_failures;
        if (!split_slot(c, batch, other_first ? other : k, out))
          ++(other_first ? other_failures : k_failures);
        else if (!split_slot(c, batch, other_first ? k : other, out))
          ++(other_first ? k_failures : other_failures);
        else {
          out.memory_capped = true;
          return true;
        }
        std::swap(out.llm_microbatches[r * m + k], out.llm_microbatches[r * m + other]);
        for (std::size_t e = 0; e < encoder_replicas; ++e) out.encoder_parts[e * m + other] = other_parts_[e];
      }
    return false;
  }

  // The members of `part`, gathered for the memory model.
  std::span<const sample> gather(std::span<const sample> batch, std::span<const std::uint32_t> part) {
    gathered_.clear();
    for (std::uint32_t i : part) gathered_.push_back(batch[i]);
    return gathered_;
  }

  bool encoder_slot_fits(std::span<const sample> batch, std::size_t replicas, std::size_t m, std::size_t k,
                         const batch_schedule& out) {
    for (std::size_t e = 0; e < replicas; ++e)
      if (!cap_->excess(module_kind::encoder, gather(batch, out.encoder_parts[e * m + k])).fits()) return false;
    return true;
  }

  // Whether `part` with sample `i` added fits the encoder's cap.
  bool part_fits_with(std::span<const sample> batch, std::vector<std::uint32_t>& part, std::uint32_t i) {
    part.push_back(i);
    const bool fits = cap_->excess(module_kind::encoder, gather(batch, part)).fits();
    part.pop_back();
    return fits;
  }

  // Slot k's samples (in `slot_samples_`, heaviest first) again, each to the
  // least-loaded replica where its part still fits; notes the slot and the
  // closest miss in `slot_miss_` when one fits nowhere (the message is only
  // written for the first failed slot of a batch: trades fail by the thousand).
  bool split_slot_within_cap(std::span<const sample> batch, std::size_t replicas, std::size_t m, std::size_t k,
                             batch_schedule& out) {
    for (std::size_t e = 0; e < replicas; ++e) out.encoder_parts[e * m + k].clear();
    std::fill(encoder_load_.begin(), encoder_load_.end(), 0.0);
    for (std::uint32_t i : slot_samples_) {
      // The least-loaded replica (lowest index among equals) usually holds the
      // sample: then it is the answer of the full scan below, found with one
      // memory estimate instead of one per replica (trades call this often).
      const auto lightest = static_cast<std::size_t>(
          std::min_element(encoder_load_.begin(), encoder_load_.end()) - encoder_load_.begin());
      if (part_fits_with(batch, out.encoder_parts[lightest * m + k], i)) {
        encoder_load_[lightest] += encoder_cost_[i];
        out.encoder_parts[lightest * m + k].push_back(i);
        continue;
      }
      std::size_t best = replicas;
      memory_excess closest;
      for (std::size_t e = 0; e < replicas; ++e) {
        auto& part = out.encoder_parts[e * m + k];
        part.push_back(i);
        const memory_excess excess = cap_->excess(module_kind::encoder, gather(batch, part));
        part.pop_back();
        if (excess.fits()) {
          if (best == replicas || encoder_load_[e] < encoder_load_[best]) best = e;
        } else if (closest.bytes == -std::numeric_limits<double>::infinity() || excess.bytes < closest.bytes) {
          closest = excess;
        }
      }
      if (best == replicas) {
        slot_miss_ = {k, closest};
        return false;
      }
      encoder_load_[best] += encoder_cost_[i];
      out.encoder_parts[best * m + k].push_back(i);
    }
    return true;
  }

  // The `memory_cap_error` of the last failed split (`slot_miss_`, with the
  // slot's samples still in `slot_samples_`) over `replicas` encoder replicas.
  memory_cap_error slot_error(std::span<const sample> batch, std::size_t replicas) const {
    return cap_error(batch, slot_samples_, slot_miss_.closest, module_kind::encoder,
                     " of microbatch slot " + std::to_string(slot_miss_.slot) + " need encoder work that " +
                         std::to_string(replicas) + " encoder replica" + (replicas == 1 ? "" : "s") +
                         " cannot split within the memory budget, whichever LLM microbatches share the slot (" +
                         config_text() + ")");
  }

  // Fills one module's cost tables from its microbatches.
  template <class Microbatches>
  void fill_module(module_kind kind, const module_plan& plan, const rank_layout& ranks, std::span<const sample> batch,
                   std::uint32_t m, const Microbatches& microbatches, const std::vector<std::uint32_t>& recomputed,
                   bool split_backward, double weight_share, module_costs& costs) {
    const module_parallelism& d = plan.degrees;
    const auto stages = static_cast<std::uint32_t>(d.pp);
    costs.stages = stages;
    costs.replicas = static_cast<std::uint32_t>(d.dp);
    const std::size_t entries = static_cast<std::size_t>(d.dp) * m * stages;
    costs.forward.assign(entries, 0.0);
    costs.backward.assign(entries, 0.0);
    costs.transfer.assign(entries, 0.0);
    if (split_backward)
      costs.weight.assign(entries, 0.0);
    else
      costs.weight.clear();
    const double hidden = static_cast<double>(kind == module_kind::encoder ? model_->encoder.hidden : model_->llm.hidden);
    const auto element_bytes = static_cast<double>(activation_element_bytes(*memory_));
    for (std::uint32_t q = 0; q < costs.replicas; ++q)
      for (std::uint32_t k = 0; k < m; ++k) {
        const auto& members = microbatches[static_cast<std::size_t>(q) * m + k];
        if (members.empty()) continue;
        gathered_.clear();
        double tokens = 0;
        for (std::uint32_t i : members) {
          gathered_.push_back(batch[i]);
          tokens += static_cast<double>(kind == module_kind::encoder ? batch[i].encoder_tokens : batch[i].llm_tokens);
        }
        const module_cost unit = cost_->estimate_time(kind, d.tp, gathered_);
        // Activations leave a stage split over its TP ranks, each over its own link.
        const double bytes = tokens * hidden * element_bytes / d.tp;
        for (std::uint32_t s = 0; s < stages; ++s) {
          const std::size_t at = costs.at(q, k, s, m);
          const stage_slice slice = plan.slice(static_cast<int>(s));
          const pass_time time = unit.stage_recomputing(slice, recomputed[at]);
          costs.forward[at] = time.forward;
          if (split_backward) {
            costs.weight[at] = time.backward * weight_share;
            costs.backward[at] = time.backward - costs.weight[at];
          } else {
            costs.backward[at] = time.backward;
          }
          if (s + 1 < stages) {
            const int from = ranks.first_gpu(kind, static_cast<int>(q), static_cast<int>(s));
            const int to = ranks.first_gpu(kind, static_cast<int>(q), static_cast<int>(s) + 1);
            costs.transfer[at] = transfer_seconds(bytes, ranks.link_between(from, to));
          }
        }
      }
    costs.gradient_bytes.resize(stages);
    // The distributed optimizer: gradients reduce-scattered, parameters gathered
    // at the next step's start (what the executor runs for stages with parameters()).
    const bool sharded = d.distributed_optimizer && d.dp > 1;
    costs.sharded_parameter_bytes.assign(sharded ? stages : 0, 0.0);
    link slowest{std::numeric_limits<double>::infinity(), 0};
    for (std::uint32_t s = 0; s < stages; ++s) {
      const auto held = memory_->estimate_memory(kind, d.tp, plan.slice(static_cast<int>(s)), 0, {});
      costs.gradient_bytes[s] = static_cast<double>(held.gradients);
      if (sharded) costs.sharded_parameter_bytes[s] = static_cast<double>(held.parameters);
      const link over = ranks.gradient_link(kind, static_cast<int>(s));
      if (over.bandwidth < slowest.bandwidth) slowest = over;
    }
    costs.gradient_link = slowest;
  }

  void fill_costs(const plan_layout& layout, std::span<const sample> batch, const batch_options& options,
                  batch_schedule& out) {
    const parallel_config& c = layout.config;
    const rank_layout ranks(c, *cluster_);
    const auto m = static_cast<std::uint32_t>(c.microbatches);
    multimodal_costs& costs = out.costs;
    costs.microbatches = m;
    costs.gradient_bucket_bytes = options.gradient_bucket_bytes;
    const bool split = layout.schedule.split_backward;
    if (c.has_encoder()) {
      fill_module(module_kind::encoder, layout.encoder, ranks, batch, m, out.encoder_parts, out.encoder_recomputed,
                  split, options.weight_gradient_share, costs.encoder);
    } else {
      costs.encoder = module_costs{};  // no encoder: no stages, no replicas, no ops
      costs.encoder.replicas = 0;
    }
    fill_module(module_kind::llm, layout.llm, ranks, batch, m, out.llm_microbatches, out.llm_recomputed, split,
                options.weight_gradient_share, costs.llm);

    // Hand-offs: each encoder replica sends each LLM replica the projected tokens
    // (LLM hidden size, in the memory model's activation precision) of exactly
    // the samples that replica needs.
    const auto encoder_replicas = c.has_encoder() ? static_cast<std::size_t>(c.encoder.dp) : 0;
    const auto llm_replicas = static_cast<std::size_t>(c.llm.dp);
    costs.handoffs.assign(encoder_replicas * m * llm_replicas, handoff{});
    if (encoder_replicas == 0) return;
    owner_.assign(batch.size(), UINT32_MAX);
    for (std::size_t r = 0; r < llm_replicas; ++r)
      for (std::uint32_t k = 0; k < m; ++k)
        for (std::uint32_t i : out.llm_microbatches[r * m + k]) owner_[i] = static_cast<std::uint32_t>(r);
    const double projected_bytes_per_token =
        static_cast<double>(model_->llm.hidden) * static_cast<double>(activation_element_bytes(*memory_));
    for (std::size_t e = 0; e < encoder_replicas; ++e)
      for (std::uint32_t k = 0; k < m; ++k) {
        handoff_bytes_.assign(llm_replicas, 0.0);
        for (std::uint32_t i : out.encoder_parts[e * m + k]) {
          costs.handoffs[costs.handoff_at(static_cast<std::uint32_t>(e), k, owner_[i])].feeds = true;
          handoff_bytes_[owner_[i]] += static_cast<double>(batch[i].encoder_tokens) * projected_bytes_per_token;
        }
        for (std::size_t r = 0; r < llm_replicas; ++r) {
          handoff& h = costs.handoffs[costs.handoff_at(static_cast<std::uint32_t>(e), k, static_cast<std::uint32_t>(r))];
          if (!h.feeds) continue;
          const int from = ranks.first_gpu(module_kind::encoder, static_cast<int>(e), c.encoder.pp - 1);
          const int to = ranks.first_gpu(module_kind::llm, static_cast<int>(r), 0);
          h.seconds = transfer_seconds(handoff_bytes_[r], ranks.link_between(from, to));
        }
      }
  }

  void order_and_simulate(const plan_layout& layout, const batch_options& options, batch_schedule& out) {
    if (options.order == order_policy::identity) {
      out.slot_order = identity_order(out.costs.microbatches);
      simulator_.simulate(layout.schedule, out.costs, result_, out.slot_order);
      out.predicted_seconds = result_.makespan;
      return;
    }
    auto found = order_slots(options.order, layout.schedule, out.costs, simulator_, options.order_budget);
    out.slot_order = std::move(found.order);
    out.predicted_seconds = found.makespan;
  }

  const multimodal_spec* model_;
  const cluster_spec* cluster_;
  const Cost* cost_;
  const Memory* memory_;
  Packer packer_;
  // Reused scratch.
  std::vector<double> encoder_cost_, sample_costs_, bin_encoder_, bin_llm_, replica_load_, encoder_load_;
  std::vector<std::size_t> bin_target_, slot_fill_;
  std::vector<std::pair<double, std::size_t>> open_slots_;  // assign_slots: (encoder work, slot) of slots with room
  std::vector<std::uint32_t> order_, slot_of_bin_, bins_by_slot_, slot_bins_, slot_samples_, owner_;
  std::vector<double> handoff_bytes_;  // bytes one encoder part sends each LLM replica
  std::vector<char> replica_taken_;
  std::vector<sample> gathered_;
  std::vector<std::vector<std::uint32_t>> other_parts_;  // trade_for_fit: the other slot's parts before a split
  cost_matrix matrix_;
  pack_workspace workspace_;
  packing packing_;
  batch_schedule alternative_;
  batch_schedule reordered_;  // a batch ordered again with its lowered recompute costs
  multimodal_simulator simulator_;
  simulation_result result_;
  batch_recompute<Memory> recompute_;  // data-aware recompute counts
  // The memory budget of the batch being scheduled.
  std::optional<memory_cap<Memory>> cap_;
  bin_caps caps_;
  std::vector<std::size_t> over_bins_;
  memory_excess worst_excess_;
  bool llm_capped_ = false;
  std::optional<memory_cap_error> encoder_failure_;
  struct slot_miss {
    std::size_t slot = 0;   // the slot whose split failed
    memory_excess closest;  // the failing sample's smallest excess over the replicas
  } slot_miss_;             // split_slot_within_cap: its last failure
  parallel_config config_;
};

}  // namespace dflop
