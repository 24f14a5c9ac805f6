// SPDX-License-Identifier: Apache-2.0
//! \file
//! The data-aware 3D parallelism search. For every split of the GPUs into
//! encoder and LLM GPUs, every (tp, pp, dp) per module and every microbatch
//! count, it prices the layers with the real data, splits them with the
//! partitioner, rejects what does not fit in memory, ranks the rest by a fast
//! analytic estimate and scores the most promising ones by packing, ordering
//! and simulating sampled global batches — skipping any whose lower bound
//! cannot beat the best found. The two baselines are chosen and scored in the
//! same simulator with the same cost model, so the comparison is like for like.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/throughput_curve.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/pack/sequential_packer.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/util/parallel_for.hpp>
#include <dflop/util/progress.hpp>
#include <dflop/workload/sampling.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

namespace dflop {

//! Settings of a plan search.
struct planner_options {
  int global_batch = 512;                //!< samples per iteration
  int batches = 4;                       //!< sampled global batches every candidate is scored on
  std::uint64_t seed = 0;                //!< batch sampling and packing seed
  batch_options batch;                   //!< per-batch policies (slot assignment, order, budget)
  double memory_headroom = 0.10;         //!< fraction of GPU memory kept free (CUDA context, fragmentation)
  std::vector<int> microbatch_counts;    //!< m values to try; empty: 1, 2, 3, 4, 6, 8, 12, 16, ... up to the batch
  std::size_t max_simulated = 48;        //!< most fitting candidates scored by simulation (0: no limit)
  std::size_t finalists = 8;             //!< best scanned candidates scored again with the full order policy
  bool prune_by_bound = true;            //!< skip candidates whose lower bound cannot win
  bool baselines = true;                 //!< also choose and score data_blind and dflop_reference
  std::size_t baseline_attempts = 64;    //!< a baseline's choices tried before it turns on memory savers
  unsigned threads = 0;                  //!< threads scoring the sampled batches (0: the hardware's); same plan for any count
  double ideal_efficiency = throughput_curve{}.max_efficiency;  //!< best fraction of peak any kernel reaches
  std::ostream* progress = nullptr;      //!< progress output (null: none)
  bool progress_interactive = false;     //!< redraw in place (a terminal) or print lines
};

//! Searches plans for one model and cluster with the given policies.
template <cost_model Cost, memory_model Memory, layer_partitioner Partitioner = min_max_layers,
          packer Packer = refined_packer, schedule Schedule = named_schedule>
class planner {
public:
  planner(multimodal_spec model, cluster_spec cluster, Cost cost, Memory memory, planner_options options = {},
          Partitioner partitioner = {}, Packer pack_policy = {}, Schedule schedule_policy = {})
      : model_(std::move(model)), cluster_(std::move(cluster)), cost_(std::move(cost)), memory_(std::move(memory)),
        options_(std::move(options)), partitioner_(std::move(partitioner)), packer_(std::move(pack_policy)),
        schedule_(std::move(schedule_policy)) {
    validate_cluster(cluster_);
    if (options_.global_batch < 1)
      throw input_error("--global-batch", 0, "must be at least 1, got " + std::to_string(options_.global_batch));
    if (options_.batches < 1)
      throw input_error("--batches", 0, "must be at least 1, got " + std::to_string(options_.batches));
    if (!(options_.memory_headroom >= 0 && options_.memory_headroom < 1))
      throw input_error("memory_headroom", 0, "must be in [0, 1)");
    for (int m : options_.microbatch_counts)
      if (m < 1) throw input_error("microbatch_counts", 0, "every microbatch count must be >= 1");
  }

  //! Plans for `workload` (at least one global batch of samples). Throws
  //! `infeasible_error` naming the closest configuration and its shortfall
  //! when nothing fits in memory.
  [[nodiscard]] plan make_plan(std::span<const sample> workload) {
    const auto started = std::chrono::steady_clock::now();
    if (workload.size() < static_cast<std::size_t>(options_.global_batch))
      throw input_error("workload", 0,
                        std::to_string(workload.size()) + " samples cannot fill a global batch of " +
                            std::to_string(options_.global_batch));
    prepare(workload);
    auto lap = [last = started]() mutable {
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - last).count();
      last = now;
      return seconds;
    };

    plan result;
    result.search.enumeration_seconds = lap();
    result.model = model_.name;
    result.model_spec = model_;
    result.batch = options_.batch;
    result.cluster = cluster_;
    result.global_batch = options_.global_batch;
    result.batches = options_.batches;
    result.schedule = std::string(schedule_.name());
    result.ideal_seconds = ideal_seconds();

    // The baselines' configurations join dflop's finalists: scored with dflop's
    // layer split and per-batch policies they are candidates like any other.
    std::vector<parallel_config> baseline_configs;
    if (options_.baselines) {
      if (auto blind = baseline(false)) result.baselines.push_back(std::move(*blind));
      if (auto reference = baseline(true)) result.baselines.push_back(std::move(*reference));
      for (const auto& baseline : result.baselines) baseline_configs.push_back(baseline.config);
    }
    result.search.baseline_seconds = lap();
    const auto best = search(result.search, baseline_configs);
    if (!best) throw infeasible_error(closest_miss_text());
    result.chosen = *best;
    result.memory = stage_memories(best->config, partitioner_, tail_cache_);
    result.search.scoring_seconds = lap();
    result.search.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  //! The global batches candidates are scored on (after `make_plan`).
  [[nodiscard]] const std::vector<std::vector<sample>>& sampled_batches() const noexcept { return batches_; }

  //! Scores one configuration on the sampled batches exactly as the search does
  //! (for tests and tools): mean simulated seconds, or nullopt when its tail
  //! microbatches do not fit. Call after `make_plan`, or after `prepare(workload)`.
  [[nodiscard]] std::optional<double> score(const parallel_config& config) {
    const auto layout = layout_of(config, partitioner_);
    tail_samples tails;
    const double seconds = simulate_all(layout, packer_, options_.batch, &tails);
    if (memory_shortfall(config, partitioner_, tails) > 0) return std::nullopt;
    return seconds;
  }

  //! Samples the batches and enumerates candidates without searching (for `score`).
  void prepare(std::span<const sample> workload) {
    batches_ = sample_batches(workload, static_cast<std::size_t>(options_.global_batch),
                              static_cast<std::size_t>(options_.batches), batch_mode::without_replacement,
                              options_.seed);
    enumerate();
  }

  //! Every enumerated configuration (after `prepare` or `make_plan`).
  [[nodiscard]] std::vector<parallel_config> candidates() const {
    std::vector<parallel_config> configs;
    configs.reserve(candidates_.size());
    for (const auto& candidate : candidates_) configs.push_back(candidate.config);
    return configs;
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

  //! The layout (layer splits, op lists) of a chosen method's configuration.
  [[nodiscard]] plan_layout layout_of(const method_result& chosen) {
    if (chosen.method == "dflop") return layout_of(chosen.config, partitioner_);
    return layout_of(chosen.config, even_layers{});
  }

  //! Schedules one global batch for the chosen plan exactly as it was scored.
  [[nodiscard]] batch_schedule schedule_batch(const method_result& chosen, std::span<const sample> batch,
                                              std::uint64_t seed = 0) {
    batch_options options = options_.batch;
    options.seed = seed;
    batch_scheduler<Cost, Memory, Packer> scheduler(model_, cluster_, cost_, memory_, packer_);
    return scheduler.schedule(layout_of(chosen), batch, options);
  }

private:
  struct candidate {
    parallel_config config;
    double estimate = 0;             // 1F1B fill/drain + bottleneck estimate with mean microbatches
    double bottleneck_estimate = 0;  // (m + S - 1) x slowest stage, the reference's formula
    double lower_bound = 0;  // no simulated score of this configuration is below it
  };

  // One microbatch per module, viewed: what a memory check prices.
  struct microbatch_views {
    std::span<const sample> llm;
    std::span<const sample> encoder;
  };

  // The samples of the tail microbatches seen while scoring a configuration.
  struct tail_samples {
    std::vector<sample> llm;
    std::vector<sample> encoder;
    operator microbatch_views() const noexcept { return {llm, encoder}; }  // NOLINT: views are what checks take
  };

  // ---------------------------------------------------------------- enumeration

  [[nodiscard]] std::vector<int> microbatch_counts(int llm_dp) const {
    const int most = options_.global_batch / llm_dp;
    std::vector<int> counts;
    if (!options_.microbatch_counts.empty()) {
      for (int m : options_.microbatch_counts)
        if (m <= most) counts.push_back(m);
      return counts;
    }
    for (int base = 1; base <= most; base *= 2) {
      counts.push_back(base);
      if (base >= 2 && base + base / 2 <= most) counts.push_back(base + base / 2);
    }
    std::sort(counts.begin(), counts.end());
    return counts;
  }

  void enumerate() {
    candidates_.clear();
    total_stage_cost_.clear();
    mean_bins_.clear();
    partitions_.clear();
    even_partitions_.clear();
    module_infos_.clear();
    schedules_.clear();
    const int gpus = cluster_.gpus;
    for (int encoder_gpus = 1; encoder_gpus < gpus; ++encoder_gpus) {
      const auto encoder_options = module_parallelisms(encoder_gpus, cluster_.gpus_per_node, model_.encoder.heads,
                                                       static_cast<int>(model_.encoder.layers));
      const auto llm_options = module_parallelisms(gpus - encoder_gpus, cluster_.gpus_per_node, model_.llm.kv_heads,
                                                   static_cast<int>(model_.llm.layers));
      for (const auto& encoder : encoder_options) {
        const module_info& encoder_info = info_of(module_kind::encoder, encoder);
        for (const auto& llm : llm_options) {
          const module_info& llm_info = info_of(module_kind::llm, llm);
          const double bound = std::max(encoder_info.lower_bound, llm_info.lower_bound);
          for (int m : microbatch_counts(llm.dp)) {
            candidate c{{encoder, llm, m}, 0, 0, bound};
            std::tie(c.estimate, c.bottleneck_estimate) = estimate(c.config, encoder_info, llm_info);
            candidates_.push_back(c);
          }
        }
      }
    }
    // Scoring order: the two estimates' rankings interleaved. Neither estimate
    // sees the cross-replica waits a simulation finds, and they err differently,
    // so a small simulation budget spent on both finds good plans more reliably.
    std::vector<std::size_t> by_estimate(candidates_.size());
    std::iota(by_estimate.begin(), by_estimate.end(), std::size_t{0});
    std::vector<std::size_t> by_bottleneck = by_estimate;
    std::stable_sort(by_estimate.begin(), by_estimate.end(),
                     [&](std::size_t a, std::size_t b) { return candidates_[a].estimate < candidates_[b].estimate; });
    std::stable_sort(by_bottleneck.begin(), by_bottleneck.end(), [&](std::size_t a, std::size_t b) {
      return candidates_[a].bottleneck_estimate < candidates_[b].bottleneck_estimate;
    });
    std::vector<char> queued(candidates_.size(), 0);
    scoring_order_.clear();
    for (std::size_t i = 0; i < candidates_.size(); ++i)
      for (std::size_t index : {by_estimate[i], by_bottleneck[i]})
        if (!queued[index]) {
          queued[index] = 1;
          scoring_order_.push_back(index);
        }
  }

  // ---------------------------------------------------------------- pricing helpers

  [[nodiscard]] std::int64_t layers_of(module_kind kind) const noexcept {
    return kind == module_kind::encoder ? model_.encoder.layers : model_.llm.layers;
  }

  // Mean over the sampled batches of the whole batch as one microbatch, per (module, tp).
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

  // Expected cost of each layer (embedding on the first, head on the last), for the partitioner.
  [[nodiscard]] std::vector<double> layer_costs(module_kind kind, int tp) {
    const module_cost& cost = batch_cost(kind, tp);
    std::vector<double> costs(static_cast<std::size_t>(layers_of(kind)), cost.layer.total());
    costs.front() += cost.embedding.total();
    costs.back() += cost.head.total();
    return costs;
  }

  template <layer_partitioner P>
  [[nodiscard]] module_plan module_plan_of(module_kind kind, const module_parallelism& degrees, const P& policy) {
    // The search's partitioner and the baselines' even split are cached apart.
    auto& cache = std::is_same_v<P, Partitioner> ? partitions_ : even_partitions_;
    const auto key = std::make_tuple(kind, degrees.tp, degrees.pp);
    auto found = cache.find(key);
    if (found == cache.end())
      found = cache.emplace(key, policy.partition(layer_costs(kind, degrees.tp), static_cast<std::size_t>(degrees.pp)))
                  .first;
    return make_module_plan(degrees, found->second);
  }

  // The schedule's op lists and in-flight peaks per pipeline shape, built once:
  // memory checks of thousands of candidates need only the peaks.
  struct schedule_entry {
    pipeline_schedule schedule;
    std::vector<std::uint32_t> peaks;
  };
  [[nodiscard]] const schedule_entry& schedule_of(const parallel_config& config) {
    const auto key = std::make_pair(config.stages(), config.microbatches);
    if (auto found = schedules_.find(key); found != schedules_.end()) return found->second;
    plan_layout layout = make_plan_layout(config, {}, {}, schedule_);  // rejects interleaving schedules
    auto peaks = peak_activations(layout.schedule);
    return schedules_.emplace(key, schedule_entry{std::move(layout.schedule), std::move(peaks)}).first->second;
  }

  template <layer_partitioner P>
  [[nodiscard]] plan_layout layout_of(const parallel_config& config, const P& policy) {
    return {config, module_plan_of(module_kind::encoder, config.encoder, policy),
            module_plan_of(module_kind::llm, config.llm, policy), schedule_of(config).schedule};
  }

  // The mean cost of one of `parts` microbatches cut in arrival order from the
  // first batch. Beyond `most_priced` parts an evenly spaced `most_priced` of them
  // are priced: thousands of distinct part counts (1024 GPUs) would otherwise
  // each price the whole batch; spaced chunks keep the mean unbiased.
  [[nodiscard]] const module_cost& mean_bin(module_kind kind, int tp, int parts) {
    constexpr int most_priced = 512;
    const auto key = std::make_tuple(kind, tp, parts);
    if (auto found = mean_bins_.find(key); found != mean_bins_.end()) return found->second;
    const auto& batch = batches_.front();
    module_cost sum;
    const std::size_t n = batch.size();
    const int priced = std::min(parts, most_priced);
    for (int i = 0; i < priced; ++i) {
      const int part = static_cast<int>(static_cast<std::int64_t>(i) * parts / priced);
      const std::size_t begin = n * static_cast<std::size_t>(part) / static_cast<std::size_t>(parts);
      const std::size_t end = n * static_cast<std::size_t>(part + 1) / static_cast<std::size_t>(parts);
      const module_cost one = cost_.estimate_time(kind, tp, std::span<const sample>(batch).subspan(begin, end - begin));
      sum.layer = sum.layer + one.layer;
      sum.embedding = sum.embedding + one.embedding;
      sum.head = sum.head + one.head;
    }
    const double scale = 1.0 / priced;
    return mean_bins_.emplace(key, module_cost{scale * sum.layer, scale * sum.embedding, scale * sum.head}).first->second;
  }

  // What the enumeration needs of one module's degrees, computed once per degrees.
  struct module_info {
    module_plan plan;          // degrees and the partitioner's layer split
    double lower_bound = 0;    // max over stages of the whole batch's stage work / dp
    double gradient_sync = 0;  // slowest stage's gradient all-reduce
  };

  // Valid lower bound on any simulated iteration: some replica of every stage
  // carries at least its share (1/dp) of the whole batch's work on that stage.
  [[nodiscard]] const module_info& info_of(module_kind kind, const module_parallelism& d) {
    const auto key = std::make_tuple(kind, d.tp, d.pp, d.dp);
    if (auto found = module_infos_.find(key); found != module_infos_.end()) return found->second;
    module_info info{module_plan_of(kind, d, partitioner_), 0, 0};
    const module_cost& whole = batch_cost(kind, d.tp);
    // A configuration whose placement puts this module's data-parallel group
    // across nodes pays the network; the module's own degrees decide that.
    parallel_config placement;
    (kind == module_kind::encoder ? placement.encoder : placement.llm) = d;
    const rank_layout ranks(placement, cluster_);
    for (int s = 0; s < d.pp; ++s) {
      info.lower_bound = std::max(info.lower_bound, whole.stage(info.plan.slice(s)).total() / d.dp);
      const double bytes = static_cast<double>(memory_.estimate_memory(kind, d.tp, info.plan.slice(s), 0, {}).gradients);
      info.gradient_sync = std::max(
          info.gradient_sync, ring_allreduce_seconds(bytes, static_cast<std::uint32_t>(d.dp), ranks.gradient_link(kind, s)));
    }
    return module_infos_.emplace(key, std::move(info)).first->second;
  }

  // Two estimates with mean microbatches: 1F1B-shaped (fill and drain through
  // every stage once, the bottleneck stage for the other m - 1, then the
  // gradient sync) and the reference's (m + S - 1) x slowest stage.
  [[nodiscard]] std::pair<double, double> estimate(const parallel_config& config, const module_info& encoder,
                                                   const module_info& llm) {
    double sum = 0;
    double slowest = 0;
    for (const module_info* info : {&encoder, &llm}) {
      const module_kind kind = info == &encoder ? module_kind::encoder : module_kind::llm;
      const module_parallelism& d = info->plan.degrees;
      // An encoder replica's microbatch for a slot is its share of that slot's
      // samples: the batch cut into encoder.dp x m parts; an LLM bin is one of llm.dp x m.
      const module_cost& bin = mean_bin(kind, d.tp, d.dp * config.microbatches);
      for (int s = 0; s < d.pp; ++s) {
        const double time = bin.stage(info->plan.slice(s)).total();
        sum += time;
        slowest = std::max(slowest, time);
      }
    }
    return {sum + (config.microbatches - 1) * slowest + std::max(encoder.gradient_sync, llm.gradient_sync),
            (config.microbatches + config.stages() - 1) * slowest};
  }

  // ---------------------------------------------------------------- memory

  [[nodiscard]] double capacity() const noexcept {
    return static_cast<double>(cluster_.gpu.memory_bytes) * (1.0 - options_.memory_headroom);
  }

  // Memory of every stage of `config` (layers split by `policy`) with the tail
  // microbatches and the schedule's in-flight peaks; builds no op lists.
  template <layer_partitioner P>
  [[nodiscard]] std::vector<stage_memory> stage_memories(const parallel_config& config, const P& policy,
                                                         const microbatch_views& tails) {
    const auto& peaks = schedule_of(config).peaks;
    std::vector<stage_memory> memories;
    for (module_kind kind : all_module_kinds) {
      const bool encoder = kind == module_kind::encoder;
      const module_plan plan = module_plan_of(kind, encoder ? config.encoder : config.llm, policy);
      const auto& tail = encoder ? tails.encoder : tails.llm;
      for (int s = 0; s < plan.degrees.pp; ++s) {
        const int in_flight = static_cast<int>(peaks[static_cast<std::size_t>(encoder ? s : config.encoder.pp + s)]);
        memories.push_back({kind, s, in_flight,
                            estimate_memory_with(memory_, kind, plan.degrees.tp, plan.slice(s), in_flight, tail,
                                                 memory_choices_of(plan.degrees))});
      }
    }
    return memories;
  }

  // Bytes by which the worst stage exceeds usable memory (<= 0: fits).
  template <layer_partitioner P>
  [[nodiscard]] double memory_shortfall(const parallel_config& config, const P& policy, const microbatch_views& tails) {
    double worst = -std::numeric_limits<double>::infinity();
    for (const auto& stage : stage_memories(config, policy, tails))
      worst = std::max(worst, static_cast<double>(stage.bytes.total()) - capacity());
    return worst;
  }

  void note_miss(const parallel_config& config, double shortfall) {
    if (shortfall > 0 && (!closest_miss_ || shortfall < closest_miss_->second)) closest_miss_ = {config, shortfall};
  }

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

  // The p99 microbatches of a fixed assignment rule, without simulating.
  template <packer P>
  tail_samples assigned_tails(const plan_layout& layout, const P& pack_policy, const batch_options& options) {
    return over_batches(layout, pack_policy, options, nullptr, true);
  }

  // Mean simulated seconds over the sampled batches; collects the p99 microbatches.
  template <packer P>
  double simulate_all(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                      tail_samples* tails) {
    double seconds = 0;
    tail_samples found = over_batches(layout, pack_policy, options, &seconds, tails != nullptr);
    if (tails != nullptr) *tails = std::move(found);
    return seconds;
  }

  // Schedules (or, without `seconds`, only assigns) every sampled batch, on
  // `planner_options::threads` threads: each batch's results land in its own
  // slot and are combined in batch order, so any thread count gives the same
  // figures. Sets `*seconds` to the mean prediction; returns the p99 microbatches
  // when `want_tails`.
  template <packer P>
  tail_samples over_batches(const plan_layout& layout, const P& pack_policy, const batch_options& options,
                            double* seconds, bool want_tails) {
    using groups = std::vector<std::pair<std::int64_t, std::vector<sample>>>;
    struct batch_result {
      double seconds = 0;
      groups llm_bins, encoder_parts;
    };
    std::vector<batch_result> results(batches_.size());
    const unsigned threads = options_.threads == 0 ? default_thread_count() : options_.threads;
    std::vector<batch_scheduler<Cost, Memory, P>> schedulers;
    std::vector<batch_schedule> schedules(std::min<std::size_t>(threads, batches_.size()));
    for (std::size_t w = 0; w < schedules.size(); ++w) schedulers.emplace_back(model_, cluster_, cost_, memory_, pack_policy);
    parallel_for(batches_.size(), threads, [&](std::size_t b, unsigned worker) {
      batch_options own = options;
      own.seed = options_.seed + b;
      batch_schedule& schedule = schedules[worker];
      if (seconds != nullptr) {
        schedulers[worker].schedule(layout, batches_[b], own, schedule);
        results[b].seconds = schedule.predicted_seconds;
      } else {
        schedulers[worker].assign_only(layout, batches_[b], own, schedule);
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
    return {p99_members(llm_bins), p99_members(encoder_parts)};
  }

  static void collect(const std::vector<sample>& batch, const std::vector<std::vector<std::uint32_t>>& groups,
                      std::int64_t sample::*field, std::vector<std::pair<std::int64_t, std::vector<sample>>>& out) {
    for (const auto& group : groups) {
      std::pair<std::int64_t, std::vector<sample>> entry{0, {}};
      for (std::uint32_t i : group) {
        entry.first += batch[i].*field;
        entry.second.push_back(batch[i]);
      }
      out.push_back(std::move(entry));
    }
  }

  // The group at the 99th percentile (nearest rank) of token counts.
  static std::vector<sample> p99_members(std::vector<std::pair<std::int64_t, std::vector<sample>>>& groups) {
    if (groups.empty()) return {};
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(groups.size()) - 1e-9));
    return groups[std::max<std::size_t>(rank, 1) - 1].second;
  }

  // A typical microbatch (the median arrival-order chunk) per module, to reject
  // configurations whose activations cannot fit before simulating them.
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

  // A configuration scored by the scan: its simulated seconds, the memory
  // variant that fits, and the candidate it came from.
  struct scanned {
    double seconds = 0;
    parallel_config config;
    double estimate = 0;
  };

  // Scores `base` with the cheapest memory variant whose typical microbatches
  // fit, moving on to costlier variants while the tail microbatches do not.
  // nullopt (with the miss noted) when none fits.
  [[nodiscard]] std::optional<scanned> scan_candidate(const candidate& c, const batch_options& options,
                                                      search_statistics& statistics) {
    const auto variants = memory_variants(c.config);
    std::size_t next = 0;
    const auto fits_quickly = [&]() {
      for (; next < variants.size(); ++next) {
        const double shortfall = memory_shortfall(variants[next], partitioner_, typical_microbatches(c.config));
        if (shortfall <= 0) return true;
        note_miss(variants[next], shortfall);
      }
      return false;
    };
    while (fits_quickly()) {
      const parallel_config& config = variants[next];
      const plan_layout layout = layout_of(config, partitioner_);
      tail_samples tails;
      const double seconds = simulate_all(layout, packer_, options, &tails);
      ++statistics.simulated;
      if (const double shortfall = memory_shortfall(config, partitioner_, tails); shortfall > 0) {
        note_miss(config, shortfall);
        ++next;
        // Variants that change no time (the distributed optimizer) reuse this simulation.
        for (; next < variants.size() && variants[next].encoder.recompute == config.encoder.recompute &&
               variants[next].llm.recompute == config.llm.recompute;
             ++next) {
          const double sharded = memory_shortfall(variants[next], partitioner_, tails);
          if (sharded <= 0) return scanned{seconds, variants[next], c.estimate};
          note_miss(variants[next], sharded);
        }
        continue;
      }
      return scanned{seconds, config, c.estimate};
    }
    return std::nullopt;
  }

  [[nodiscard]] std::optional<method_result> search(search_statistics& statistics,
                                                    std::span<const parallel_config> extra_finalists = {}) {
    statistics.candidates = candidates_.size();
    std::optional<method_result> best;
    progress_bar bar(options_.progress, "planning", candidates_.size(), options_.progress_interactive);
    std::size_t fitting = 0;
    std::vector<scanned> finalists;
    batch_options scan_options = options_.batch;
    if (scan_options.order == order_policy::neh) scan_options.order = order_policy::johnson;
    for (const std::size_t index : scoring_order_) {
      const candidate& c = candidates_[index];
      bar.advance();
      // The final scoring can only shorten the scan's times, so the bound is
      // compared with the scan's best (a bound at or above it cannot win).
      if (best && options_.prune_by_bound && c.lower_bound >= best->iteration_seconds) {
        ++statistics.bound_pruned;
        continue;
      }
      // The budget counts plans that fit; simulations whose tail microbatches
      // turn out not to fit are capped apart, so a memory-tight case still finds plans.
      // Until one plan fits the search goes on: a memory-tight model must not be
      // declared infeasible because the first candidates' tails did not fit.
      if (options_.max_simulated != 0 && (fitting >= options_.max_simulated ||
                                          (fitting > 0 && statistics.simulated >= 4 * options_.max_simulated))) {
        ++statistics.over_budget;
        continue;
      }
      const auto found = scan_candidate(c, scan_options, statistics);
      if (!found) {
        ++statistics.memory_rejected;
        continue;
      }
      ++fitting;
      finalists.push_back(*found);
      if (!best || found->seconds < best->iteration_seconds) {
        const plan_layout layout = layout_of(found->config, partitioner_);
        best = method_result{"dflop", found->config, layout.encoder, layout.llm, c.estimate, found->seconds, true, 0, 0};
      }
    }
    bar.finish();

    // The scan ordered slots with Johnson's rule (one simulation); the few best
    // are scored again with the configured order policy, and the winner's
    // figures are those of that final scoring: what schedule_batch will do.
    std::stable_sort(finalists.begin(), finalists.end(),
                     [](const scanned& a, const scanned& b) { return a.seconds < b.seconds; });
    finalists.resize(std::min(finalists.size(), std::max<std::size_t>(1, options_.finalists)));
    for (const parallel_config& config : extra_finalists)
      if (std::none_of(finalists.begin(), finalists.end(), [&](const scanned& f) { return f.config == config; }))
        finalists.push_back({0.0, config, 0.0});
    best.reset();
    for (const scanned& finalist : finalists) {
      const plan_layout layout = layout_of(finalist.config, partitioner_);
      tail_samples tails;
      const double seconds = simulate_all(layout, packer_, options_.batch, &tails);
      if (memory_shortfall(finalist.config, partitioner_, tails) > 0) continue;  // another slot order, another tail: still must fit
      if (!best || seconds < best->iteration_seconds) {
        best = method_result{"dflop", finalist.config, layout.encoder, layout.llm, finalist.estimate, seconds, true, 0, 0};
        best->peak_memory_gib = peak_gib(stage_memories(finalist.config, partitioner_, tails));
        tail_cache_ = std::move(tails);
      }
    }
    return best;
  }

  [[nodiscard]] static double peak_gib(const std::vector<stage_memory>& stages) {
    double peak = 0;
    for (const auto& stage : stages) peak = std::max(peak, static_cast<double>(stage.bytes.total()));
    return peak / (1 << 30);
  }

  // ---------------------------------------------------------------- baselines

  // The mean sample of the sampled batches (what data-blind planners reason with).
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

  // Data-blind choices (both baselines), best first by the method's own model:
  // even layer split, (m + S - 1) x slowest stage with mean-sample microbatches,
  // keeping what its memory model accepts. `reference` = the DFLOP reference's
  // memory model, which ignores how many microbatches 1F1B keeps in flight.
  [[nodiscard]] std::vector<method_result> rank_by_mean(bool reference) {
    const sample mean = mean_sample();
    std::vector<method_result> ranked;
    // Microbatches of k mean samples and their costs, per k (and TP): a million
    // candidates share a few hundred sizes. Memory checks price the k samples as
    // one sample holding their tokens (memory is linear in tokens: flash
    // attention keeps no score matrix), so a check costs the same for any k.
    std::map<std::size_t, std::vector<sample>> of_size;
    const auto mean_microbatch = [&](std::size_t count) -> const std::vector<sample>& {
      auto found = of_size.find(count);
      if (found == of_size.end()) found = of_size.emplace(count, std::vector<sample>(count, mean)).first;
      return found->second;
    };
    std::map<std::size_t, sample> merged_of_size;
    const auto merged_microbatch = [&](std::size_t count) -> std::span<const sample> {
      auto found = merged_of_size.find(count);
      if (found == merged_of_size.end()) {
        const auto k = static_cast<std::int64_t>(count);
        sample merged{"mean x " + std::to_string(count), mean.kind, k * mean.encoder_items, k * mean.encoder_tokens,
                      k * mean.llm_tokens};
        found = merged_of_size.emplace(count, std::move(merged)).first;
      }
      return {&found->second, 1};
    };
    std::map<std::tuple<module_kind, int, std::size_t>, module_cost> costs;
    const auto cost_of = [&](module_kind kind, int tp, const std::vector<sample>& microbatch) -> const module_cost& {
      const auto key = std::make_tuple(kind, tp, microbatch.size());
      auto found = costs.find(key);
      if (found == costs.end()) found = costs.emplace(key, cost_.estimate_time(kind, tp, microbatch)).first;
      return found->second;
    };
    for (const candidate& c : candidates_) {
      const auto per_bin = static_cast<std::size_t>(
          std::max(1L, std::lround(static_cast<double>(options_.global_batch) / c.config.bins())));
      const auto per_encoder_part = static_cast<std::size_t>(std::max(
          1L, std::lround(static_cast<double>(options_.global_batch) / (c.config.encoder.dp * c.config.microbatches))));
      const std::vector<sample>& llm_microbatch = mean_microbatch(per_bin);
      const std::vector<sample>& encoder_microbatch = mean_microbatch(per_encoder_part);
      const microbatch_views mean_microbatches{merged_microbatch(per_bin), merged_microbatch(per_encoder_part)};
      // Like a user of such a framework, the method turns on memory savers only
      // when its memory rule says the configuration does not fit without them.
      for (const parallel_config& config : memory_variants(c.config)) {
        const double shortfall = reference ? reference_memory_shortfall(config, mean_microbatches)
                                           : memory_shortfall(config, even_layers{}, mean_microbatches);
        if (shortfall > 0) continue;
        const module_cost& encoder = cost_of(module_kind::encoder, config.encoder.tp, encoder_microbatch);
        const module_cost& llm = cost_of(module_kind::llm, config.llm.tp, llm_microbatch);
        const module_plan encoder_plan = module_plan_of(module_kind::encoder, config.encoder, even_layers{});
        const module_plan llm_plan = module_plan_of(module_kind::llm, config.llm, even_layers{});
        double slowest = 0;
        for (int s = 0; s < config.encoder.pp; ++s)
          slowest = std::max(slowest, encoder.stage(encoder_plan.slice(s), config.encoder.recompute).total());
        for (int s = 0; s < config.llm.pp; ++s)
          slowest = std::max(slowest, llm.stage(llm_plan.slice(s), config.llm.recompute).total());
        const double estimate = (config.microbatches + config.stages() - 1) * slowest;
        ranked.push_back(method_result{reference ? "dflop_reference" : "data_blind", config, encoder_plan, llm_plan,
                                       estimate, 0, true, 0, 0});
        break;
      }
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const method_result& a, const method_result& b) { return a.estimated_seconds < b.estimated_seconds; });
    return ranked;
  }

  // The method's first choice that really fits (a user whose run runs out of
  // memory moves on to the next choice); when none of the first
  // `baseline_attempts` does, the first that fits once the user also turns on
  // the next memory savers (the packing, and so the tails, stay the same).
  // nullopt when neither rule finds one.
  [[nodiscard]] std::optional<method_result> baseline(bool reference) {
    std::size_t out_of_memory = 0;
    std::optional<method_result> with_savers;
    std::size_t attempts_before_savers = 0;
    for (method_result& choice : rank_by_mean(reference)) {
      if (out_of_memory >= options_.baseline_attempts) break;
      // Out of memory is known from the packing alone: no need to simulate it.
      const plan_layout layout = layout_of(choice.config, even_layers{});
      batch_options options = options_.batch;
      options.assignment = slot_assignment::round_robin;
      const tail_samples tails = reference ? assigned_tails(layout, refined_packer{}, options)
                                           : assigned_tails(layout, sequential_packer{}, options);
      if (memory_shortfall(choice.config, even_layers{}, tails) > 0) {
        if (!with_savers)
          if (const auto saver = next_fitting_variant(choice.config, tails)) {
            with_savers = choice;
            with_savers->config = *saver;
            with_savers->encoder.degrees = saver->encoder;
            with_savers->llm.degrees = saver->llm;
            attempts_before_savers = out_of_memory + 1;
          }
        ++out_of_memory;
        continue;
      }
      choice = score_baseline(std::move(choice));
      if (choice.fits_memory) {
        choice.out_of_memory_attempts = out_of_memory;
        return choice;
      }
      ++out_of_memory;
    }
    if (!with_savers) return std::nullopt;
    method_result choice = score_baseline(std::move(*with_savers));
    if (!choice.fits_memory) return std::nullopt;
    choice.out_of_memory_attempts = attempts_before_savers;
    return choice;
  }

  // The first memory variant after `config` (of its base configuration) whose
  // `tails` fit with even layers.
  [[nodiscard]] std::optional<parallel_config> next_fitting_variant(const parallel_config& config,
                                                                    const microbatch_views& tails) {
    const auto variants = memory_variants(without_memory_savers(config));
    auto at = std::find(variants.begin(), variants.end(), config);
    if (at == variants.end()) return std::nullopt;
    for (++at; at != variants.end(); ++at)
      if (memory_shortfall(*at, even_layers{}, tails) <= 0) return *at;
    return std::nullopt;
  }

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

  [[nodiscard]] method_result score_baseline(method_result choice) {
    const plan_layout layout = layout_of(choice.config, even_layers{});
    batch_options options = options_.batch;
    options.assignment = slot_assignment::round_robin;
    options.order = order_policy::identity;
    tail_samples tails;
    if (choice.method == "data_blind")
      choice.iteration_seconds = simulate_all(layout, sequential_packer{}, options, &tails);
    else
      choice.iteration_seconds = simulate_all(layout, refined_packer{}, options, &tails);
    choice.peak_memory_gib = peak_gib(stage_memories(choice.config, even_layers{}, tails));
    choice.fits_memory = memory_shortfall(choice.config, even_layers{}, tails) <= 0;
    return choice;
  }

  // ---------------------------------------------------------------- ideal

  // Training FLOPs of the mean sampled batch over every GPU at the best efficiency.
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

  multimodal_spec model_;
  cluster_spec cluster_;
  Cost cost_;
  Memory memory_;
  planner_options options_;
  Partitioner partitioner_;
  Packer packer_;
  Schedule schedule_;

  std::vector<std::vector<sample>> batches_;
  std::vector<candidate> candidates_;
  std::vector<std::size_t> scoring_order_;  // candidate indices in the order the search scores them
  std::map<std::pair<module_kind, int>, module_cost> total_stage_cost_;
  std::map<std::tuple<module_kind, int, int>, module_cost> mean_bins_;
  std::map<std::tuple<module_kind, int, int>, layer_partition> partitions_;
  std::map<std::tuple<module_kind, int, int>, layer_partition> even_partitions_;
  std::map<std::tuple<module_kind, int, int, int>, module_info> module_infos_;
  std::map<std::pair<int, int>, schedule_entry> schedules_;  // by (stages, microbatches)
  std::optional<std::pair<parallel_config, double>> closest_miss_;
  tail_samples tail_cache_;
};

}  // namespace dflop
