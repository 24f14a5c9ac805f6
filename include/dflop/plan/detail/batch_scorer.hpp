// SPDX-License-Identifier: Apache-2.0
//! \file
//! How a configuration does on the sampled global batches: each batch packed,
//! ordered and simulated as `schedule_batch` would (mean predicted seconds),
//! the tail microbatches the packing produced (for memory checks), whether the
//! tail batches pack within the memory budget, and how often the budget acts
//! on fresh batches. Batches run on `planner_options::threads` threads with
//! results combined in batch order, so any thread count gives the same figures.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/detail/sampled_batches.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/util/parallel_for.hpp>
#include <dflop/util/saturating.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace dflop::detail {

//! Which microbatch of the sampled batches a memory check takes as the tail.
enum class tail_rule : std::uint8_t {
  p99,       //!< the 99th percentile by tokens: how the baselines (blind to memory) are checked
  heaviest,  //!< the most tokens seen: dflop's plans, whose batches are packed within the memory budget
};

//! Mean predicted seconds over scored batches: every sampled batch
//! (`complete`), or the first half only, when that half was already slower
//! than the caller could use.
struct batches_score {
  double seconds = 0;
  bool complete = true;
};

//! Scores layouts of one model and cluster on a search's `sampled_batches`
//! (see the file comment). Holds pointers to its inputs, which must outlive it.
template <cost_model Cost, memory_model Memory>
class batch_scorer {
public:
  //! Schedules batches of `model` on `cluster` priced by `cost` and `memory`,
  //! with `options`' threads, seed and global batch size, on `batches`.
  batch_scorer(const multimodal_spec& model, const cluster_spec& cluster, const Cost& cost, const Memory& memory,
               const planner_options& options, const sampled_batches& batches)
      : model_(&model), cluster_(&cluster), cost_(&cost), memory_(&memory), options_(&options), batches_(&batches) {}

  //! The p99 microbatches of a fixed assignment rule, without simulating.
  template <packer P>
  tail_samples assigned_tails(const plan_layout& layout, const P& pack_policy, const batch_options& options) {
    return over_batches(layout, pack_policy, options, nullptr, tail_rule::p99);
  }

  //! Mean simulated seconds over the sampled batches; collects the tail
  //! microbatches by `rule`. Throws `memory_cap_error` when `options` carry a
  //! memory budget that some sampled batch cannot be packed within.
  template <packer P>
  double simulate_all(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                      tail_samples* tails, tail_rule rule) {
    return simulate_unless_slower(layout, pack_policy, options, tails, rule, std::numeric_limits<double>::infinity())
        .seconds;
  }

  //! `simulate_all`, unless the mean over the first half of the batches
  //! (rounded up) is above `give_up_above`: then that half's mean, not
  //! `complete`, the other batches not simulated and `tails` untouched. A
  //! search ranking candidates spends half as much on one that cannot rank
  //! among the best.
  template <packer P>
  batches_score simulate_unless_slower(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                                       tail_samples* tails, tail_rule rule, double give_up_above) {
    batches_score score;
    bool gave_up = false;
    tail_samples found =
        over_batches(layout, pack_policy, options, &score.seconds, rule, tails != nullptr, give_up_above, &gave_up);
    score.complete = !gave_up;
    if (score.complete && tails != nullptr) *tails = std::move(found);
    return score;
  }

  //! Whether every tail batch packs within the memory budget of `options` as
  //! `schedule_batch` packs it with `pack_policy` (without simulating).
  template <packer P>
  [[nodiscard]] bool tail_batches_fit(const plan_layout& layout, const P& pack_policy, const batch_options& options) {
    if (options.memory_budget_bytes == 0 || batches_->tails.empty()) return true;
    const auto verdicts = pack_within_cap(layout, pack_policy, options, batches_->tails, options.seed);
    return std::none_of(verdicts.begin(), verdicts.end(), [](cap_verdict v) { return v == cap_verdict::infeasible; });
  }

  //! How often the memory budget of `options` acts on `layout`'s batches: packs
  //! `count` fresh global batches of `workload` (drawn with `seed`) with
  //! `pack_policy` as `schedule_batch` does, without simulating.
  template <packer P>
  [[nodiscard]] memory_cap_estimate estimate_cap(const plan_layout& layout, const P& pack_policy,
                                                 const batch_options& options, std::span<const sample> workload,
                                                 std::size_t count, std::uint64_t seed) {
    memory_cap_estimate estimate;
    estimate.batches = count;
    if (count == 0 || options.memory_budget_bytes == 0) return estimate;
    const auto fresh = sample_batches(workload, static_cast<std::size_t>(options_->global_batch), count,
                                      batch_mode::without_replacement, seed);
    for (const cap_verdict verdict : pack_within_cap(layout, pack_policy, options, fresh, seed)) {
      estimate.capped += verdict != cap_verdict::untouched ? 1 : 0;
      estimate.infeasible += verdict == cap_verdict::infeasible ? 1 : 0;
    }
    return estimate;
  }

  //! A typical microbatch (the median arrival-order chunk) per module, to reject
  //! configurations whose activations cannot fit before simulating them.
  [[nodiscard]] tail_samples typical_microbatches(const parallel_config& config) const {
    const auto& batch = batches_->scoring.front();
    tail_samples typical;
    const auto chunk = [&](int parts) {
      const std::size_t size = std::max<std::size_t>(1, batch.size() / static_cast<std::size_t>(parts));
      return std::vector<sample>(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(size));
    };
    typical.llm = chunk(config.bins());
    // An encoder part holds a slot's encoder samples for llm.dp bins split over encoder.dp replicas.
    typical.encoder = chunk(std::max(1, config.encoder.dp * config.microbatches));
    return typical;
  }

private:
  // What the memory budget did to one batch.
  enum class cap_verdict : std::uint8_t { untouched, capped, infeasible };

  // Packs each of `batches` (batch b with seed + b) as `schedule_batch` would
  // under `options`' budget, without simulating: under best_simulated it
  // falls back to the other assignment rule when one's encoder parts cannot fit.
  template <packer P>
  std::vector<cap_verdict> pack_within_cap(const plan_layout& layout, const P& pack_policy,
                                           const batch_options& options,
                                           const std::vector<std::vector<sample>>& batches, std::uint64_t seed) {
    std::vector<slot_assignment> rules{options.assignment};
    if (options.assignment == slot_assignment::best_simulated)
      rules = {slot_assignment::balanced, slot_assignment::round_robin};
    std::vector<cap_verdict> verdicts(batches.size(), cap_verdict::infeasible);
    for_each_batch(batches.size(), pack_policy, [&](std::size_t b, auto& scheduler, batch_schedule& schedule) {
      batch_options own = options;
      own.seed = seed + b;
      bool acted = false;  // a rule failed the budget: it acted on this batch
      for (const slot_assignment rule : rules) {
        own.assignment = rule;
        try {
          scheduler.assign_only(layout, batches[b], own, schedule);
          verdicts[b] = acted || schedule.memory_capped ? cap_verdict::capped : cap_verdict::untouched;
          return;
        } catch (const memory_cap_error&) {
          acted = true;
        }
      }
    });
    return verdicts;
  }

  // Runs `work(b, scheduler, schedule)` for every b below `count` on
  // `planner_options::threads` threads, each with its own scheduler and
  // schedule to reuse; results must land in per-b slots.
  template <packer P, class Work>
  void for_each_batch(std::size_t count, const P& pack_policy, Work&& work) {
    for_each_batch(0, count, pack_policy, work);
  }

  // `for_each_batch` over the batches b in [begin, end).
  template <packer P, class Work>
  void for_each_batch(std::size_t begin, std::size_t end, const P& pack_policy, Work&& work) {
    const unsigned threads = options_->threads == 0 ? default_thread_count() : options_->threads;
    std::vector<batch_scheduler<Cost, Memory, P>> schedulers;
    std::vector<batch_schedule> schedules(std::min<std::size_t>(threads, end - begin));
    for (std::size_t w = 0; w < schedules.size(); ++w)
      schedulers.emplace_back(*model_, *cluster_, *cost_, *memory_, pack_policy);
    parallel_for(end - begin, threads,
                 [&](std::size_t i, unsigned worker) { work(begin + i, schedulers[worker], schedules[worker]); });
  }

  // Schedules (or, without `seconds`, only assigns) every scoring batch: each
  // batch's results land in its own slot and are combined in batch order. Sets
  // `*seconds` to the mean prediction; returns the tail microbatches by `rule`
  // when `want_tails`. With a finite `give_up_above` (and `seconds`), the first
  // half of the batches goes first; when their mean is above it, sets
  // `*seconds` to that mean and `*gave_up`, and returns nothing else.
  template <packer P>
  tail_samples over_batches(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                            double* seconds, tail_rule rule, bool want_tails = true,
                            double give_up_above = std::numeric_limits<double>::infinity(),
                            bool* gave_up = nullptr) {
    const auto& batches = batches_->scoring;
    struct batch_result {
      double seconds = 0;
      token_groups llm_bins, encoder_parts;
    };
    std::vector<batch_result> results(batches.size());
    const auto score = [&](std::size_t b, auto& scheduler, batch_schedule& schedule) {
      batch_options own = options;
      own.seed = options_->seed + b;
      if (seconds != nullptr) {
        scheduler.schedule(layout, batches[b], own, schedule);
        results[b].seconds = schedule.predicted_seconds;
      } else {
        scheduler.assign_only(layout, batches[b], own, schedule);
      }
      if (!want_tails) return;
      collect(batches[b], schedule.llm_microbatches, &sample::llm_tokens, results[b].llm_bins);
      collect(batches[b], schedule.encoder_parts, &sample::encoder_tokens, results[b].encoder_parts);
    };
    const bool may_give_up = seconds != nullptr && gave_up != nullptr && std::isfinite(give_up_above);
    const std::size_t first = may_give_up ? (batches.size() + 1) / 2 : batches.size();
    for_each_batch(0, first, pack_policy, score);
    if (first < batches.size()) {
      double head = 0;
      for (std::size_t b = 0; b < first; ++b) head += results[b].seconds;
      if (head / static_cast<double>(first) > give_up_above) {
        *seconds = head / static_cast<double>(first);
        *gave_up = true;
        return {};
      }
      for_each_batch(first, batches.size(), pack_policy, score);
    }
    double total = 0;
    for (const auto& result : results) total += result.seconds;
    if (seconds != nullptr) *seconds = total / static_cast<double>(batches.size());
    if (!want_tails) return {};
    return {tail_members(results, &batch_result::llm_bins, rule),
            tail_members(results, &batch_result::encoder_parts, rule)};
  }

  // One batch's microbatches of a module: each one's token count in that
  // module and its members (indices into the batch), flattened. Only the tail
  // group's samples are copied out, once all batches are in.
  struct token_groups {
    std::vector<std::int64_t> tokens;
    std::vector<std::size_t> first{0};  // group g's members are members[first[g], first[g + 1])
    std::vector<std::uint32_t> members;
  };

  static void collect(const std::vector<sample>& batch, const std::vector<std::vector<std::uint32_t>>& groups,
                      std::int64_t sample::*field, token_groups& out) {
    for (const auto& group : groups) {
      std::int64_t tokens = 0;
      for (std::uint32_t i : group) tokens = saturating_add(tokens, batch[i].*field);
      out.tokens.push_back(tokens);
      out.members.insert(out.members.end(), group.begin(), group.end());
      out.first.push_back(out.members.size());
    }
  }

  // Over every batch's groups (batch order, then group order), the group at the
  // 99th percentile (nearest rank) of token counts, or the one with the most
  // (the last of equals, as a stable sort leaves them); its samples.
  template <class Result>
  std::vector<sample> tail_members(const std::vector<Result>& results, token_groups Result::*groups_of,
                                   tail_rule rule) const {
    struct group_at {
      std::int64_t tokens;
      std::size_t batch, group;
    };
    std::vector<group_at> groups;
    for (std::size_t b = 0; b < results.size(); ++b) {
      const token_groups& groups_b = results[b].*groups_of;
      for (std::size_t g = 0; g < groups_b.tokens.size(); ++g) groups.push_back({groups_b.tokens[g], b, g});
    }
    if (groups.empty()) return {};
    std::stable_sort(groups.begin(), groups.end(), [](const group_at& a, const group_at& c) { return a.tokens < c.tokens; });
    const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(groups.size()) - 1e-9));
    const group_at& tail = rule == tail_rule::heaviest ? groups.back() : groups[std::max<std::size_t>(rank, 1) - 1];
    const token_groups& owner = results[tail.batch].*groups_of;
    std::vector<sample> members;
    for (std::size_t at = owner.first[tail.group]; at < owner.first[tail.group + 1]; ++at)
      members.push_back(batches_->scoring[tail.batch][owner.members[at]]);
    return members;
  }

  const multimodal_spec* model_;
  const cluster_spec* cluster_;
  const Cost* cost_;
  const Memory* memory_;
  const planner_options* options_;
  const sampled_batches* batches_;
};

}  // namespace dflop::detail
