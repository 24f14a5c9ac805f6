// SPDX-License-Identifier: Apache-2.0
//! \file
//! What the plan search asks of one configuration, answered on the sampled
//! global batches: layer costs and splits, schedules and their in-flight peaks,
//! whether the tail microbatches fit in memory (with memory savers), and the
//! mean simulated iteration time. Everything priced is cached, so thousands of
//! candidates share the work of a few hundred module shapes.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/layer_partition.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/plan/stage_memories.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/schedule/op.hpp>
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
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop::detail {

// `dflop::stage_memory` (a plan's bytes per stage) is written qualified: the
// executors' `detail::stage_memory` (their allocator) would hide it here.

//! One microbatch per module, viewed: what a memory check prices.
struct microbatch_views {
  std::span<const sample> llm;      //!< an LLM microbatch (bin)
  std::span<const sample> encoder;  //!< an encoder part
};

//! Which microbatch of the sampled batches a memory check takes as the tail.
enum class tail_rule : std::uint8_t {
  p99,       //!< the 99th percentile by tokens: how the baselines (blind to memory) are checked
  heaviest,  //!< the most tokens seen: dflop's plans, whose batches are packed within the memory budget
};

//! The samples of the tail microbatches seen while scoring a configuration.
struct tail_samples {
  std::vector<sample> llm;      //!< the tail LLM bin
  std::vector<sample> encoder;  //!< the tail encoder part
  //! Both microbatches, viewed.
  operator microbatch_views() const noexcept { return {llm, encoder}; }  // NOLINT: views are what checks take
};

//! Largest stage memory of `stages`, GiB.
[[nodiscard]] inline double peak_gib(const std::vector<dflop::stage_memory>& stages) {
  double peak = 0;
  for (const auto& stage : stages) peak = std::max(peak, static_cast<double>(stage.bytes.total()));
  return peak / (1 << 30);
}

//! Prices, checks and scores configurations of one model and cluster on the
//! sampled global batches, with the planner's policies; owns the inputs, the
//! batches and every cache (rebuilt whenever batches are drawn).
template <cost_model Cost, memory_model Memory, layer_partitioner Partitioner, packer Packer, schedule Schedule>
class plan_scorer {
public:
  //! Keeps the inputs and policies; `draw_batches` before anything is priced.
  plan_scorer(multimodal_spec model, cluster_spec cluster, Cost cost, Memory memory, planner_options options,
              Partitioner partitioner, Packer pack_policy, Schedule schedule_policy)
      : model_(std::move(model)), cluster_(std::move(cluster)), cost_(std::move(cost)), memory_(std::move(memory)),
        options_(std::move(options)), partitioner_(std::move(partitioner)), packer_(std::move(pack_policy)),
        schedule_(std::move(schedule_policy)) {
    // dflop's batches are packed within the usable memory (the planner rejects
    // a headroom outside [0, 1) right after this).
    if (!(options_.memory_headroom >= 0 && options_.memory_headroom < 1)) return;
    const auto budget = static_cast<std::int64_t>(capacity());
    std::int64_t& given = options_.batch.memory_budget_bytes;
    if (given != 0 && given != budget)
      throw input_error("batch.memory_budget_bytes", 0,
                        "the planner sets the memory budget from the GPU's memory and memory_headroom (" +
                            std::to_string(budget) + " bytes here); got " + std::to_string(given) +
                            ": leave it 0 and set memory_headroom instead");
    given = budget;
  }

  [[nodiscard]] const multimodal_spec& model() const noexcept { return model_; }      //!< the model planned
  [[nodiscard]] const cluster_spec& cluster() const noexcept { return cluster_; }     //!< the GPUs planned on
  [[nodiscard]] const Cost& cost() const noexcept { return cost_; }                   //!< prices microbatches
  [[nodiscard]] const Memory& memory() const noexcept { return memory_; }             //!< counts stage bytes
  [[nodiscard]] const planner_options& options() const noexcept { return options_; }  //!< the search's settings
  [[nodiscard]] const Partitioner& partitioner() const noexcept { return partitioner_; }  //!< the search's layer split
  [[nodiscard]] const Packer& pack_policy() const noexcept { return packer_; }             //!< the search's packer
  [[nodiscard]] const Schedule& schedule_policy() const noexcept { return schedule_; }     //!< orders each rank's ops

  //! The global batches configurations are scored on.
  [[nodiscard]] const std::vector<std::vector<sample>>& batches() const noexcept { return batches_; }

  //! The workload's sample with the most LLM tokens and the one with the most
  //! encoder tokens, each as a microbatch of its own: a plan must hold both
  //! alone (the memory model needs more bytes for more tokens), or some batch
  //! that draws them cannot fit, however it is packed.
  [[nodiscard]] const tail_samples& heaviest_samples() const noexcept { return heaviest_; }

  //! The heaviest global batches of many drawn: half by encoder tokens, half by
  //! LLM tokens (`planner_options::tail_batches` in all, from 64 times as many
  //! draws). A plan whose memory budget they cannot be packed within would fail
  //! on such batches in training; four scoring batches rarely show them.
  [[nodiscard]] const std::vector<std::vector<sample>>& tail_batches() const noexcept { return tail_batches_; }

  //! Samples `options().batches` global batches from `workload` and forgets
  //! every cached price, split and schedule (they depend on the batches).
  void draw_batches(std::span<const sample> workload) {
    batches_ = sample_batches(workload, static_cast<std::size_t>(options_.global_batch),
                              static_cast<std::size_t>(options_.batches), batch_mode::without_replacement,
                              options_.seed);
    heaviest_.llm.clear();
    heaviest_.encoder.clear();
    const auto most = [&](std::int64_t sample::*field) {
      return *std::max_element(workload.begin(), workload.end(),
                               [&](const sample& a, const sample& b) { return a.*field < b.*field; });
    };
    if (!workload.empty()) {
      heaviest_.llm.push_back(most(&sample::llm_tokens));
      heaviest_.encoder.push_back(most(&sample::encoder_tokens));
    }
    draw_tail_batches(workload);
    total_stage_cost_.clear();
    partitions_.clear();
    schedules_.clear();
  }

  // ---------------------------------------------------------------- pricing

  //! Layers of `kind`.
  [[nodiscard]] std::int64_t layers_of(module_kind kind) const noexcept {
    return kind == module_kind::encoder ? model_.encoder.layers : model_.llm.layers;
  }

  //! Mean over the sampled batches of the whole batch as one microbatch, per (module, tp).
  // With a fixed cost per microbatch (the throughput curve's), splitting a batch
  // never makes the parts cheaper in sum, so stage totals of the whole batch bound any packing from below.
  [[nodiscard]] const module_cost& batch_cost(module_kind kind, int tp) {
    const auto key = std::make_pair(kind, tp);
    if (auto found = total_stage_cost_.find(key); found != total_stage_cost_.end()) return found->second;
    module_cost sum;
    for (const auto& batch : batches_) {
      const module_cost one = cost_.estimate_time(kind, tp, batch);
      sum.layer = sum.layer + one.layer;
      sum.embedding = sum.embedding + one.embedding;
      sum.head = sum.head + one.head;
    }
    const double scale = 1.0 / static_cast<double>(batches_.size());
    module_cost mean{scale * sum.layer, scale * sum.embedding, scale * sum.head};
    return total_stage_cost_.emplace(key, mean).first->second;
  }

  //! Expected cost of each layer (embedding on the first, head on the last), for the partitioner.
  [[nodiscard]] std::vector<double> layer_costs(module_kind kind, int tp) {
    const module_cost& cost = batch_cost(kind, tp);
    std::vector<double> costs(static_cast<std::size_t>(layers_of(kind)), cost.layer.total());
    costs.front() += cost.embedding.total();
    costs.back() += cost.head.total();
    return costs;
  }

  //! `degrees` of `kind` with its layers split by `policy` (the search's
  //! partitioner or the baselines' `even_layers`).
  template <layer_partitioner P>
  [[nodiscard]] module_plan module_plan_of(module_kind kind, const module_parallelism& degrees, const P& policy) {
    // Keyed by the policy's name: the search's partitioner and the baselines'
    // even split (or any other) never read each other's splits.
    auto key = std::make_tuple(std::string(policy.name()), kind, degrees.tp, degrees.pp);
    auto found = partitions_.find(key);
    if (found == partitions_.end())
      found = partitions_
                  .emplace(std::move(key),
                           policy.partition(layer_costs(kind, degrees.tp), static_cast<std::size_t>(degrees.pp)))
                  .first;
    return make_module_plan(degrees, found->second);
  }

  //! A schedule's op lists and the in-flight peak of each stage.
  struct schedule_entry {
    pipeline_schedule schedule;        //!< every rank's ops
    std::vector<std::uint32_t> peaks;  //!< most microbatches in flight, per stage
  };

  //! The schedule's op lists and in-flight peaks for `config`'s pipeline shape.
  // Built once per shape: memory checks of thousands of candidates need only the peaks.
  [[nodiscard]] const schedule_entry& schedule_of(const parallel_config& config) {
    const auto key = std::make_pair(config.stages(), config.microbatches);
    if (auto found = schedules_.find(key); found != schedules_.end()) return found->second;
    plan_layout layout = make_plan_layout(config, {}, {}, schedule_);  // rejects interleaving schedules
    auto peaks = peak_activations(layout.schedule);
    return schedules_.emplace(key, schedule_entry{std::move(layout.schedule), std::move(peaks)}).first->second;
  }

  //! The layout of `config` with its layers split by `policy`.
  template <layer_partitioner P>
  [[nodiscard]] plan_layout layout_of(const parallel_config& config, const P& policy) {
    return {config, module_plan_of(module_kind::encoder, config.encoder, policy),
            module_plan_of(module_kind::llm, config.llm, policy), schedule_of(config).schedule};
  }

  // ---------------------------------------------------------------- memory

  //! Usable bytes per GPU: its memory less the headroom.
  [[nodiscard]] double capacity() const noexcept {
    return static_cast<double>(cluster_.gpu.memory_bytes) * (1.0 - options_.memory_headroom);
  }

  //! Memory of every stage of `config` (layers split by `policy`) with the tail
  //! microbatches and the schedule's in-flight peaks; builds no op lists.
  template <layer_partitioner P>
  [[nodiscard]] std::vector<dflop::stage_memory> stage_memories(const parallel_config& config, const P& policy,
                                                         const microbatch_views& tails) {
    const auto& peaks = schedule_of(config).peaks;
    return price_stage_memories(memory_, module_plan_of(module_kind::encoder, config.encoder, policy),
                                module_plan_of(module_kind::llm, config.llm, policy), peaks, tails.encoder,
                                tails.llm);
  }

  //! Bytes by which the worst stage exceeds usable memory (<= 0: fits).
  template <layer_partitioner P>
  [[nodiscard]] double memory_shortfall(const parallel_config& config, const P& policy, const microbatch_views& tails) {
    double worst = -std::numeric_limits<double>::infinity();
    for (const auto& stage : stage_memories(config, policy, tails))
      worst = std::max(worst, static_cast<double>(stage.bytes.total()) - capacity());
    return worst;
  }

  //! `memory_shortfall` by the DFLOP reference's rule: even layers, and one
  //! microbatch in flight (it ignores how many 1F1B keeps).
  [[nodiscard]] double reference_memory_shortfall(const parallel_config& config, const microbatch_views& microbatches) {
    double worst = -std::numeric_limits<double>::infinity();
    for (module_kind kind : all_module_kinds) {
      const module_plan plan =
          module_plan_of(kind, kind == module_kind::encoder ? config.encoder : config.llm, even_layers{});
      const auto& samples = kind == module_kind::encoder ? microbatches.encoder : microbatches.llm;
      for (int s = 0; s < plan.degrees.pp; ++s)
        worst = std::max(worst, static_cast<double>(estimate_memory_with(memory_, kind, plan.degrees.tp, plan.slice(s),
                                                                         1, samples, memory_choices_of(plan.degrees))
                                                        .total()) -
                                    capacity());
    }
    return worst;
  }

  //! The memory savers the search tries on `base` when it does not fit as it
  //! is, cheapest first; the first variant whose tail microbatches fit is the one
  //! scored. In order: `base`; the distributed optimizer (free in compute: its
  //! reduce-scatter + all-gather replaces the all-reduce); then activation
  //! recomputation (one more forward) of the encoder, of the LLM, of both.
  //! Only a memory model that prices `memory_choices` gets more than `base`.
  [[nodiscard]] std::vector<parallel_config> memory_variants(const parallel_config& base) const {
    std::vector<parallel_config> variants{base};
    if constexpr (memory_model_with_choices<Memory>) {
      parallel_config sharded = base;
      sharded.encoder.distributed_optimizer = base.encoder.dp > 1;
      sharded.llm.distributed_optimizer = base.llm.dp > 1;
      if (!(sharded == base)) variants.push_back(sharded);
      for (const auto& [encoder, llm] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        parallel_config saver = sharded;
        saver.encoder.recompute = encoder;
        saver.llm.recompute = llm;
        variants.push_back(saver);
      }
    }
    return variants;
  }

  //! The first memory variant after `config` (of its base configuration) whose
  //! `tails` fit with even layers.
  [[nodiscard]] std::optional<parallel_config> next_fitting_variant(const parallel_config& config,
                                                                    const microbatch_views& tails) {
    const auto variants = memory_variants(without_memory_savers(config));
    auto at = std::find(variants.begin(), variants.end(), config);
    if (at == variants.end()) return std::nullopt;
    for (++at; at != variants.end(); ++at)
      if (memory_shortfall(*at, even_layers{}, tails) <= 0) return *at;
    return std::nullopt;
  }

  //! Remembers `config` when it misses memory by less than any before it.
  void note_miss(const parallel_config& config, double shortfall) {
    if (shortfall > 0 && (!closest_miss_ || shortfall < closest_miss_->second)) closest_miss_ = {config, shortfall};
  }

  //! Why nothing fits: the usable memory and the closest miss noted.
  [[nodiscard]] std::string closest_miss_text() const {
    std::string text = "no configuration of " + model_.name + " on " + std::to_string(cluster_.gpus) + " x " +
                       cluster_.gpu.name + " fits in memory (" + detail::format_fixed(capacity() / (1 << 30), 1) +
                       " GiB usable per GPU)";
    if (closest_miss_) {
      std::ostringstream config;
      config << closest_miss_->first;
      text += "; closest: " + config.str() + ", short by " +
              detail::format_fixed(closest_miss_->second / (1 << 30), 2) + " GiB on its fullest stage";
    }
    return text;
  }

  // ---------------------------------------------------------------- scoring

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
    double seconds = 0;
    tail_samples found = over_batches(layout, pack_policy, options, &seconds, rule, tails != nullptr);
    if (tails != nullptr) *tails = std::move(found);
    return seconds;
  }

  //! Whether every tail batch packs within the memory budget of `options` as
  //! `schedule_batch` packs it (without simulating).
  [[nodiscard]] bool tail_batches_fit(const plan_layout& layout, const batch_options& options) {
    if (options.memory_budget_bytes == 0 || tail_batches_.empty()) return true;
    const auto verdicts = pack_within_cap(layout, options, tail_batches_, options.seed);
    return std::none_of(verdicts.begin(), verdicts.end(), [](cap_verdict v) { return v == cap_verdict::infeasible; });
  }

  //! How often the memory budget of `options` acts on `layout`'s batches: packs
  //! `count` fresh global batches of `workload` (drawn with `seed`) as
  //! `schedule_batch` does, without simulating.
  [[nodiscard]] memory_cap_estimate estimate_cap(const plan_layout& layout, const batch_options& options,
                                                 std::span<const sample> workload, std::size_t count,
                                                 std::uint64_t seed) {
    memory_cap_estimate estimate;
    estimate.batches = count;
    if (count == 0 || options.memory_budget_bytes == 0) return estimate;
    const auto fresh = sample_batches(workload, static_cast<std::size_t>(options_.global_batch), count,
                                      batch_mode::without_replacement, seed);
    for (const cap_verdict verdict : pack_within_cap(layout, options, fresh, seed)) {
      estimate.capped += verdict != cap_verdict::untouched ? 1 : 0;
      estimate.infeasible += verdict == cap_verdict::infeasible ? 1 : 0;
    }
    return estimate;
  }

  //! A typical microbatch (the median arrival-order chunk) per module, to reject
  //! configurations whose activations cannot fit before simulating them.
  [[nodiscard]] tail_samples typical_microbatches(const parallel_config& config) const {
    const auto& batch = batches_.front();
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

  // ---------------------------------------------------------------- summaries

  //! The mean sample of the sampled batches (what data-blind planners reason with).
  [[nodiscard]] sample mean_sample() const {
    double items = 0, encoder_tokens = 0, llm_tokens = 0, count = 0;
    for (const auto& batch : batches_)
      for (const sample& s : batch) {
        items += static_cast<double>(s.encoder_items);
        encoder_tokens += static_cast<double>(s.encoder_tokens);
        llm_tokens += static_cast<double>(s.llm_tokens);
        ++count;
      }
    sample mean{"mean", modality::image, std::llround(items / count), std::llround(encoder_tokens / count),
                std::max<std::int64_t>(1, std::llround(llm_tokens / count))};
    if (mean.encoder_items == 0) mean.kind = modality::text, mean.encoder_tokens = 0;
    return mean;
  }

  //! Training FLOPs of the mean sampled batch over every GPU at the best efficiency.
  [[nodiscard]] double ideal_seconds() const {
    double flops = 0;
    for (const auto& batch : batches_)
      for (module_kind kind : all_module_kinds) {
        const microbatch_shape shape = shape_of(kind, batch);
        const double layers = static_cast<double>(layers_of(kind));
        flops += layers * part_forward_flops(model_, {kind, module_part::layer}, shape) +
                 part_forward_flops(model_, {kind, module_part::embedding}, shape) +
                 part_forward_flops(model_, {kind, module_part::head}, shape);
      }
    flops *= (1.0 + backward_flops_ratio(false)) / static_cast<double>(batches_.size());
    return flops / (cluster_.gpus * cluster_.gpu.peak_flops * options_.ideal_efficiency);
  }

private:
  // What the memory budget did to one batch.
  enum class cap_verdict : std::uint8_t { untouched, capped, infeasible };

  // Packs each of `batches` (batch b with seed + b) as `schedule_batch` would
  // under `options`' budget, without simulating: under best_simulated it
  // falls back to the other assignment rule when one's encoder parts cannot fit.
  std::vector<cap_verdict> pack_within_cap(const plan_layout& layout, const batch_options& options,
                                           const std::vector<std::vector<sample>>& batches, std::uint64_t seed) {
    std::vector<slot_assignment> rules{options.assignment};
    if (options.assignment == slot_assignment::best_simulated)
      rules = {slot_assignment::balanced, slot_assignment::round_robin};
    std::vector<cap_verdict> verdicts(batches.size(), cap_verdict::infeasible);
    for_each_batch(batches.size(), packer_, [&](std::size_t b, auto& scheduler, batch_schedule& schedule) {
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
    const unsigned threads = options_.threads == 0 ? default_thread_count() : options_.threads;
    std::vector<batch_scheduler<Cost, Memory, P>> schedulers;
    std::vector<batch_schedule> schedules(std::min<std::size_t>(threads, count));
    for (std::size_t w = 0; w < schedules.size(); ++w)
      schedulers.emplace_back(model_, cluster_, cost_, memory_, pack_policy);
    parallel_for(count, threads,
                 [&](std::size_t b, unsigned worker) { work(b, schedulers[worker], schedules[worker]); });
  }

  // Draws 64 x `tail_batches` global batches (as indices: cheap) and keeps the
  // heaviest by encoder tokens and by LLM tokens, half each, without repeats.
  void draw_tail_batches(std::span<const sample> workload) {
    tail_batches_.clear();
    const std::size_t keep = options_.tail_batches;
    const auto size = static_cast<std::size_t>(options_.global_batch);
    if (keep == 0 || workload.size() < size) return;
    batch_sampler sampler(workload.size(), size, batch_mode::without_replacement, options_.seed ^ tail_salt);
    std::vector<std::vector<std::size_t>> draws(64 * keep);
    std::vector<std::pair<std::int64_t, std::int64_t>> totals(draws.size());  // (encoder, LLM) tokens
    for (std::size_t d = 0; d < draws.size(); ++d) {
      draws[d] = sampler.next();
      for (std::size_t i : draws[d]) {
        totals[d].first = saturating_add(totals[d].first, workload[i].encoder_tokens);
        totals[d].second = saturating_add(totals[d].second, workload[i].llm_tokens);
      }
    }
    std::vector<std::size_t> by_encoder(draws.size()), by_llm(draws.size());
    std::iota(by_encoder.begin(), by_encoder.end(), std::size_t{0});
    std::iota(by_llm.begin(), by_llm.end(), std::size_t{0});
    std::stable_sort(by_encoder.begin(), by_encoder.end(),
                     [&](std::size_t a, std::size_t b) { return totals[a].first > totals[b].first; });
    std::stable_sort(by_llm.begin(), by_llm.end(),
                     [&](std::size_t a, std::size_t b) { return totals[a].second > totals[b].second; });
    std::vector<char> kept(draws.size(), 0);
    for (std::size_t k = 0, e = 0, l = 0; k < keep; ++k) {
      auto& order = k % 2 == 0 ? by_encoder : by_llm;
      auto& at = k % 2 == 0 ? e : l;
      while (kept[order[at]]) ++at;
      kept[order[at]] = 1;
      tail_batches_.push_back(gather_samples(workload, draws[order[at]]));
    }
  }

  // Mixed into the seed of the tail-batch draws, so they are not the scoring batches.
  static constexpr std::uint64_t tail_salt = 0x7461696c5f627463ULL;

  // Schedules (or, without `seconds`, only assigns) every sampled batch, on
  // `planner_options::threads` threads: each batch's results land in its own
  // slot and are combined in batch order, so any thread count gives the same
  // figures. Sets `*seconds` to the mean prediction; returns the p99 microbatches
  // when `want_tails`.
  template <packer P>
  tail_samples over_batches(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                            double* seconds, tail_rule rule, bool want_tails = true) {
    using groups = std::vector<std::pair<std::int64_t, std::vector<sample>>>;
    struct batch_result {
      double seconds = 0;
      groups llm_bins, encoder_parts;
    };
    std::vector<batch_result> results(batches_.size());
    for_each_batch(batches_.size(), pack_policy, [&](std::size_t b, auto& scheduler, batch_schedule& schedule) {
      batch_options own = options;
      own.seed = options_.seed + b;
      if (seconds != nullptr) {
        scheduler.schedule(layout, batches_[b], own, schedule);
        results[b].seconds = schedule.predicted_seconds;
      } else {
        scheduler.assign_only(layout, batches_[b], own, schedule);
      }
      if (!want_tails) return;
      collect(batches_[b], schedule.llm_microbatches, &sample::llm_tokens, results[b].llm_bins);
      collect(batches_[b], schedule.encoder_parts, &sample::encoder_tokens, results[b].encoder_parts);
    });
    double total = 0;
    groups llm_bins, encoder_parts;
    for (auto& result : results) {
      total += result.seconds;
      std::move(result.llm_bins.begin(), result.llm_bins.end(), std::back_inserter(llm_bins));
      std::move(result.encoder_parts.begin(), result.encoder_parts.end(), std::back_inserter(encoder_parts));
    }
    if (seconds != nullptr) *seconds = total / static_cast<double>(batches_.size());
    if (!want_tails) return {};
    return {tail_members(llm_bins, rule), tail_members(encoder_parts, rule)};
  }

  static void collect(const std::vector<sample>& batch, const std::vector<std::vector<std::uint32_t>>& groups,
                      std::int64_t sample::*field, std::vector<std::pair<std::int64_t, std::vector<sample>>>& out) {
    for (const auto& group : groups) {
      std::pair<std::int64_t, std::vector<sample>> entry{0, {}};
      for (std::uint32_t i : group) {
        entry.first = saturating_add(entry.first, batch[i].*field);
        entry.second.push_back(batch[i]);
      }
      out.push_back(std::move(entry));
    }
  }

  // The group at the 99th percentile (nearest rank) of token counts, or the one with the most.
  static std::vector<sample> tail_members(std::vector<std::pair<std::int64_t, std::vector<sample>>>& groups,
                                          tail_rule rule) {
    if (groups.empty()) return {};
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (rule == tail_rule::heaviest) return groups.back().second;
    const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(groups.size()) - 1e-9));
    return groups[std::max<std::size_t>(rank, 1) - 1].second;
  }

  multimodal_spec model_;
  cluster_spec cluster_;
  Cost cost_;
  Memory memory_;
  planner_options options_;
  Partitioner partitioner_;
  Packer packer_;
  Schedule schedule_;

  std::vector<std::vector<sample>> batches_;
  tail_samples heaviest_;  // the workload's heaviest sample per module, alone
  std::vector<std::vector<sample>> tail_batches_;
  std::map<std::pair<module_kind, int>, module_cost> total_stage_cost_;
  // Layer splits by (partitioner name, module, tp, pp).
  std::map<std::tuple<std::string, module_kind, int, int>, layer_partition> partitions_;
  std::map<std::pair<int, int>, schedule_entry> schedules_;  // by (stages, microbatches)
  std::optional<std::pair<parallel_config, double>> closest_miss_;
};

}  // namespace dflop::detail
