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
//! This header holds the search itself; `detail/plan_scorer.hpp` prices and
//! scores configurations, `detail/candidate_enumeration.hpp` lists and
//! estimates them, and `detail/baselines.hpp` chooses and scores the baselines.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/memory_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/batch_options.hpp>
#include <dflop/plan/batch_schedule.hpp>
#include <dflop/plan/batch_scheduler.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/detail/baselines.hpp>
#include <dflop/plan/detail/candidate_enumeration.hpp>
#include <dflop/plan/detail/plan_scorer.hpp>
#include <dflop/plan/detail/unfittable_samples.hpp>
#include <dflop/plan/layer_partitioner.hpp>
#include <dflop/plan/pack/packer.hpp>
#include <dflop/plan/pack/refined_packer.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/plan.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/schedule/concept.hpp>
#include <dflop/util/progress.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Searches plans for one model and cluster with the given policies.
template <cost_model Cost, memory_model Memory, layer_partitioner Partitioner = min_max_layers,
          packer Packer = refined_packer, schedule Schedule = named_schedule>
class planner {
public:
  //! Keeps the model, cluster, models and policies; throws `input_error` on an
  //! invalid cluster or options.
  planner(multimodal_spec model, cluster_spec cluster, Cost cost, Memory memory, planner_options options = {},
          Partitioner partitioner = {}, Packer pack_policy = {}, Schedule schedule_policy = {})
      : scorer_(std::move(model), std::move(cluster), std::move(cost), std::move(memory), std::move(options),
                std::move(partitioner), std::move(pack_policy), std::move(schedule_policy)) {
    const planner_options& settings = scorer_.options();
    validate_cluster(scorer_.cluster());
    if (settings.global_batch < 1)
      throw input_error("planner_options::global_batch", 0, "must be at least 1, got " + std::to_string(settings.global_batch));
    if (settings.batches < 1)
      throw input_error("planner_options::batches", 0, "must be at least 1, got " + std::to_string(settings.batches));
    if (!(settings.memory_headroom >= 0 && settings.memory_headroom < 1))
      throw input_error("planner_options::memory_headroom", 0, "must be in [0, 1)");
    for (int m : settings.microbatch_counts)
      if (m < 1) throw input_error("microbatch_counts", 0, "every microbatch count must be >= 1");
    if constexpr (std::same_as<Schedule, named_schedule>) {
      if (scorer_.schedule_policy().is_automatic()) {
        searched_schedules_ = checked_schedule_candidates(settings.schedule_candidates);
        use_candidate_schedule(0);  // the scan's; make_plan chooses
      }
    }
  }

  //! Plans for `workload` (at least one global batch of samples). Throws
  //! `unfittable_samples_error` naming the samples no configuration holds in
  //! memory even alone (unless `planner_options::exclude_unfittable`: then
  //! plans without them and lists them in `plan::excluded_samples`), and
  //! `infeasible_error` naming the closest configuration and its shortfall
  //! when nothing fits in memory.
  [[nodiscard]] plan make_plan(std::span<const sample> workload) {
    const auto started = std::chrono::steady_clock::now();
    const planner_options& settings = scorer_.options();
    require_full_batch(workload, "");
    if (!searched_schedules_.empty()) use_candidate_schedule(0);  // the scan's
    prepare(workload);
    std::vector<std::string> excluded;
    std::vector<sample> kept;  // the workload without what is excluded
    if (const auto unfittable = unfittable_samples(workload); !unfittable.empty()) {
      excluded.reserve(unfittable.size());
      for (std::size_t i : unfittable) excluded.push_back(workload[i].id);
      if (!settings.exclude_unfittable)
        throw unfittable_samples_error("workload", unfittable_text(workload, unfittable),
                                       "Remove them, or plan without them (planner_options::exclude_unfittable)",
                                       std::move(excluded));
      kept.reserve(workload.size() - unfittable.size());
      for (std::size_t i = 0, next = 0; i < workload.size(); ++i)
        if (next < unfittable.size() && unfittable[next] == i)
          ++next;
        else
          kept.push_back(workload[i]);
      workload = kept;
      require_full_batch(workload, " after excluding " + std::to_string(unfittable.size()) + " unfittable sample" +
                                       (unfittable.size() == 1 ? "" : "s"));
      prepare(workload);
    }
    auto lap = [last = started]() mutable {
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - last).count();
      last = now;
      return seconds;
    };

    plan result;
    result.search.enumeration_seconds = lap();
    result.model = scorer_.model().name;
    result.model_spec = scorer_.model();
    result.batch = settings.batch;
    result.cluster = scorer_.cluster();
    result.global_batch = settings.global_batch;
    result.batches = settings.batches;
    result.seed = settings.seed;
    result.ideal_seconds = scorer_.ideal_seconds();
    result.excluded_samples = std::move(excluded);

    result.baselines = choose_baselines();
    result.search.baseline_seconds = lap();
    const auto best = search(result.search, configs_of(result.baselines));
    result.schedule = std::string(scorer_.schedule_policy().name());  // with "auto": the one chosen
    if (best && !searched_schedules_.empty() && result.schedule != searched_schedules_.front() && settings.baselines) {
      // Methods are compared on one schedule: the baselines again, under the one chosen.
      result.search.scoring_seconds += lap();
      result.baselines = choose_baselines();
      result.search.baseline_seconds += lap();
    }
    if (!best) throw infeasible_error(scorer_.checks().closest_miss_text());
    result.chosen = *best;
    result.memory = scorer_.checks().stage_memories(best->config, scorer_.partitioner(), tail_cache_);
    result.memory_cap = scorer_.scoring().estimate_cap(scorer_.layouts().layout_of(best->config, scorer_.partitioner()),
                                                       scorer_.pack_policy(), settings.batch, workload,
                                                       settings.cap_check_batches, settings.seed ^ cap_check_salt);
    result.search.scoring_seconds += lap();
    result.search.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  //! The global batches candidates are scored on (after `make_plan`).
  [[nodiscard]] const std::vector<std::vector<sample>>& sampled_batches() const noexcept { return scorer_.batches(); }

  //! Scores one configuration on the sampled batches exactly as the search does
  //! (for tests and tools): mean simulated seconds, or nullopt when some sampled
  //! or tail batch cannot be packed within the memory budget or the workload's
  //! heaviest sample does not fit alone. Call after `make_plan`, or after `prepare(workload)`.
  [[nodiscard]] std::optional<double> score(const parallel_config& config) {
    return score_with(config, scorer_.options().batch);
  }

  //! Positions in `workload` of the samples that no candidate configuration
  //! holds in memory, even alone in a microbatch with every memory saver on,
  //! in workload order (after `prepare`; see `detail/unfittable_samples.hpp`).
  [[nodiscard]] std::vector<std::size_t> unfittable_samples(std::span<const sample> workload) {
    return detail::unfittable_sample_finder(scorer_, workload).find(candidates_.candidates);
  }

  //! Samples the batches and enumerates candidates without searching (for `score`).
  void prepare(std::span<const sample> workload) {
    scorer_.draw_batches(workload);
    candidates_ = detail::enumerate_candidates(scorer_);
  }

  //! Every enumerated configuration (after `prepare` or `make_plan`).
  [[nodiscard]] std::vector<parallel_config> candidates() const {
    std::vector<parallel_config> configs;
    configs.reserve(candidates_.candidates.size());
    for (const auto& candidate : candidates_.candidates) configs.push_back(candidate.config);
    return configs;
  }

  //! The memory savers the search tries on `base` when it does not fit as it
  //! is, cheapest first; the first variant whose tail microbatches fit is the one
  //! scored. In order: `base`; the distributed optimizer (free in compute, and
  //! faster: its reduce-scatter + all-gather replaces the all-reduce, the gather
  //! before each rank's first op); then activation
  //! recomputation (one more forward) of the encoder, of the LLM, of both.
  //! Only a memory model that prices `memory_choices` gets more than `base`.
  [[nodiscard]] std::vector<parallel_config> memory_variants(const parallel_config& base) const {
    return scorer_.checks().memory_variants(base);
  }

  //! The layout (layer splits, op lists) of a chosen method's configuration.
  [[nodiscard]] plan_layout layout_of(const method_result& chosen) {
    if (chosen.method == plan_method::dflop) return scorer_.layouts().layout_of(chosen.config, scorer_.partitioner());
    return scorer_.layouts().layout_of(chosen.config, even_layers{});
  }

  //! Schedules one global batch for the chosen plan exactly as it was scored.
  [[nodiscard]] batch_schedule schedule_batch(const method_result& chosen, std::span<const sample> batch,
                                              std::uint64_t seed = 0) {
    batch_options options = scorer_.options().batch;
    options.seed = seed;
    batch_scheduler<Cost, Memory, Packer> scheduler(scorer_.model(), scorer_.cluster(), scorer_.cost(),
                                                    scorer_.memory(), scorer_.pack_policy());
    return scheduler.schedule(layout_of(chosen), batch, options);
  }

private:
  void require_full_batch(std::span<const sample> workload, const std::string& context) const {
    const int global_batch = scorer_.options().global_batch;
    if (workload.size() < static_cast<std::size_t>(global_batch))
      throw input_error("workload", 0,
                        std::to_string(workload.size()) + " samples" + context + " cannot fill a global batch of " +
                            std::to_string(global_batch));
  }

  // Names the first ten unfittable samples with their token counts, and the count.
  [[nodiscard]] std::string unfittable_text(std::span<const sample> workload,
                                            std::span<const std::size_t> unfittable) const {
    std::string text = std::to_string(unfittable.size()) + " sample" + (unfittable.size() == 1 ? "" : "s") +
                       " cannot fit in memory under any configuration of " + scorer_.model().name + " on " +
                       std::to_string(scorer_.cluster().gpus) + " x " + scorer_.cluster().gpu.name + " (" +
                       detail::format_fixed(scorer_.checks().capacity() / (1 << 30), 1) +
                       " GiB usable per GPU), even alone in a microbatch with every memory saver on: ";
    for (std::size_t k = 0; k < std::min<std::size_t>(unfittable.size(), 10); ++k) {
      const sample& s = workload[unfittable[k]];
      text += (k > 0 ? ", " : "") + s.id + " (" + std::to_string(s.encoder_tokens) + " encoder, " +
              std::to_string(s.llm_tokens) + " LLM tokens)";
    }
    if (unfittable.size() > 10) text += ", and " + std::to_string(unfittable.size() - 10) + " more";
    if (2 * unfittable.size() > workload.size())
      text += " (" + std::to_string(unfittable.size()) + " of " + std::to_string(workload.size()) +
              " samples: the GPUs are too small for this workload, not a few outliers)";
    return text;
  }

  using scorer_type = detail::plan_scorer<Cost, Memory, Partitioner, Packer, Schedule>;

  // Schedule "auto": orders ops with candidate `index` from now on (only a
  // `named_schedule` planner has candidates).
  void use_candidate_schedule(std::size_t index) {
    if constexpr (std::same_as<Schedule, named_schedule>) scorer_.use_schedule(named_schedule(searched_schedules_[index]));
  }

  // The schedules "auto" searches: known one-chunk names, each once.
  [[nodiscard]] static std::vector<std::string> checked_schedule_candidates(const std::vector<std::string>& names) {
    const std::string field = "planner_options::schedule_candidates";
    if (names.empty()) throw input_error(field, 0, "is empty: schedule 'auto' needs at least one schedule to choose from");
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string& name = names[i];
      if (!is_one_chunk_schedule(name))
        throw input_error(field, 0, "entry " + std::to_string(i) + " '" + name +
                                        "' is not a one-chunk schedule (gpipe, 1f1b, zb-h1)");
      if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), name) !=
          names.begin() + static_cast<std::ptrdiff_t>(i))
        throw input_error(field, 0, "lists '" + name + "' twice");
    }
    return names;
  }

  // The baselines chosen and scored under the current schedule (none unless planner_options::baselines).
  [[nodiscard]] std::vector<method_result> choose_baselines() {
    std::vector<method_result> baselines;
    if (!scorer_.options().baselines) return baselines;
    for (const auto method : {plan_method::data_blind, plan_method::dflop_reference})
      if (auto chosen = detail::choose_baseline(scorer_, candidates_.candidates, method))
        baselines.push_back(std::move(*chosen));
    return baselines;
  }

  // The baselines' configurations join dflop's finalists: scored with dflop's
  // layer split and per-batch policies they are candidates like any other.
  [[nodiscard]] static std::vector<parallel_config> configs_of(const std::vector<method_result>& baselines) {
    std::vector<parallel_config> configs;
    configs.reserve(baselines.size());
    for (const auto& baseline : baselines) configs.push_back(baseline.config);
    return configs;
  }

  // How much slower than the bar a candidate's mean over the first half of the
  // batches must be for the search to give it up (`planner_options::
  // give_up_on_slow`): that half's mean was within 1% of the mean over all
  // batches for every candidate of the 7B and 32B at 1024 GPUs.
  static constexpr double give_up_margin = 0.02;

  // Mixed into the seed of the fresh batches `plan::memory_cap` is estimated
  // on, so they are not the batches the plan was scored on.
  static constexpr std::uint64_t cap_check_salt = 0x6361705f63686b31ULL;

  // A configuration scored by the scan: its simulated seconds, the memory
  // variant that fits, and the candidate it came from.
  struct scanned {
    double seconds = 0;
    parallel_config config;
    double estimate = 0;
    bool tails_checked = false;  // its tail batches were packed within the memory budget
    bool given_up = false;       // slower than the cutoff on the first half of the batches: nothing else is known
  };

  // Whether `config`'s tail batches pack within the memory budget.
  [[nodiscard]] bool tail_batches_fit(const parallel_config& config) {
    return scorer_.scoring().tail_batches_fit(scorer_.layouts().layout_of(config, scorer_.partitioner()),
                                              scorer_.pack_policy(), scorer_.options().batch);
  }

  // `score` with slots ordered as `options` say (the scan: Johnson's rule).
  [[nodiscard]] std::optional<double> score_with(const parallel_config& config, const batch_options& options) {
    if (scorer_.checks().memory_shortfall(config, scorer_.partitioner(), scorer_.heaviest_samples()) > 0) return std::nullopt;
    if (!tail_batches_fit(config)) return std::nullopt;
    const auto layout = scorer_.layouts().layout_of(config, scorer_.partitioner());
    detail::tail_samples tails;
    try {
      const double seconds = scorer_.scoring().simulate_all(layout, scorer_.pack_policy(), options, &tails,
                                                  detail::tail_rule::heaviest);
      if (scorer_.checks().memory_shortfall(config, scorer_.partitioner(), tails) > 0) return std::nullopt;
      return seconds;
    } catch (const memory_cap_error&) {
      return std::nullopt;
    }
  }

  // Whether either module of `config` recomputes activations.
  [[nodiscard]] static bool recomputes(const parallel_config& config) noexcept {
    return config.encoder.recompute || config.llm.recompute;
  }

  // Simulates `config` on the sampled batches (slots ordered as `options` say),
  // its tail microbatches into `tails`; seconds. A partly recomputing `config`
  // recomputes more layers (the fewest with which `quick` and the tails fit) and
  // is simulated again while its tails do not fit, at most a few times, then with
  // full recomputation; the caller checks the tails of what comes back (and,
  // where it needs them, the tail batches: `fits_tail_batches`). Counts
  // simulations in `simulated` when given. Not `complete` when the first half
  // of the batches is slower than `give_up_above` on average (more recomputed
  // layers would only be slower still). Throws `memory_cap_error` when a batch
  // cannot be packed within the budget.
  detail::batches_score simulate_raising_recomputation(
      parallel_config& config, const batch_options& options, std::span<const detail::microbatch_views> quick,
      detail::tail_samples& tails, std::size_t* simulated,
      double give_up_above = std::numeric_limits<double>::infinity()) {
    constexpr int max_raises = 4;
    for (int raise = 0;; ++raise) {
      const plan_layout layout = scorer_.layouts().layout_of(config, scorer_.partitioner());
      double seconds = 0;
      try {
        if (simulated) ++*simulated;
        const auto scored = scorer_.scoring().simulate_unless_slower(layout, scorer_.pack_policy(), options, &tails,
                                                                     detail::tail_rule::heaviest, give_up_above);
        if (!scored.complete) return scored;
        seconds = scored.seconds;
      } catch (const memory_cap_error&) {
        if (!partly_recomputes(config)) throw;
        config = fully_recomputing(config);
        continue;
      }
      if (!partly_recomputes(config) ||
          scorer_.checks().memory_shortfall(config, scorer_.partitioner(), tails) <= 0)
        return {seconds, true};
      if (raise == max_raises) {
        config = fully_recomputing(config);
        continue;
      }
      std::vector<detail::microbatch_views> samples(quick.begin(), quick.end());
      samples.push_back(tails);
      const auto raised = scorer_.checks().fewest_recomputed_layers(config, scorer_.partitioner(), samples);
      if (!raised) return {seconds, true};  // even full recomputation misses: the caller sees the shortfall
      config = *raised;
    }
  }

  // Whether `config`'s tail batches pack within the memory budget; a partly
  // recomputing `config` that they do not fit becomes fully recomputing when
  // that fits them (more layers recomputed only lower each microbatch's bytes,
  // so a count raised later keeps them fitting).
  [[nodiscard]] bool fits_tail_batches(parallel_config& config) {
    if (tail_batches_fit(config)) return true;
    if (!partly_recomputes(config) || !tail_batches_fit(fully_recomputing(config))) return false;
    config = fully_recomputing(config);
    return true;
  }

  // Whether a module of `config` recomputes only some of each stage's layers.
  [[nodiscard]] static bool partly_recomputes(const parallel_config& config) noexcept {
    return (config.encoder.recompute && config.encoder.recompute_layers > 0) ||
           (config.llm.recompute && config.llm.recompute_layers > 0);
  }

  // Scores `base` with the cheapest memory variant whose typical microbatches
  // fit, moving on to costlier variants while the tail microbatches do not.
  // nullopt (with the miss noted) when none fits; `given_up` set when the
  // variant tried is slower than `give_up_above` on the first half of the
  // batches (costlier variants would be slower still).
  [[nodiscard]] std::optional<scanned> scan_candidate(const detail::plan_candidate& c, const batch_options& options,
                                                      search_statistics& statistics, bool allow_recompute,
                                                      double give_up_above) {
    auto variants = scorer_.checks().memory_variants(c.config);
    if (!allow_recompute)
      std::erase_if(variants, [](const parallel_config& v) { return v.encoder.recompute || v.llm.recompute; });
    std::size_t next = 0;
    const detail::tail_samples typical = scorer_.scoring().typical_microbatches(c.config);  // the same for every variant
    // A variant must hold a typical microbatch and the workload's heaviest sample alone.
    const auto fits_quickly = [&]() {
      for (; next < variants.size(); ++next) {
        const double shortfall =
            std::max(scorer_.checks().memory_shortfall(variants[next], scorer_.partitioner(), typical),
                     scorer_.checks().memory_shortfall(variants[next], scorer_.partitioner(), scorer_.heaviest_samples()));
        if (shortfall <= 0) return true;
        scorer_.checks().note_miss(variants[next], shortfall);
      }
      return false;
    };
    while (fits_quickly()) {
      // Recomputation of the fewest layers per stage with which the typical
      // microbatch and the heaviest sample fit; raised below while the tails do not.
      parallel_config config = variants[next];
      const std::array<detail::microbatch_views, 2> quick{typical, scorer_.heaviest_samples()};
      if (recomputes(config) && scorer_.options().partial_recompute)
        config = *scorer_.checks().fewest_recomputed_layers(config, scorer_.partitioner(), quick);
      detail::tail_samples tails;
      double seconds = 0;
      try {
        const auto scored =
            simulate_raising_recomputation(config, options, quick, tails, &statistics.simulated, give_up_above);
        if (!scored.complete) return scanned{scored.seconds, config, c.estimate, false, true};
        seconds = scored.seconds;
      } catch (const memory_cap_error& failure) {  // a sampled batch cannot be packed within the budget
        scorer_.checks().note_miss(config, failure.excess_bytes());
        ++next;
        continue;
      }
      if (const double shortfall = scorer_.checks().memory_shortfall(config, scorer_.partitioner(), tails); shortfall > 0) {
        scorer_.checks().note_miss(config, shortfall);
        ++next;
        // Variants that differ only by the distributed optimizer reuse this
        // simulation: sharding only shortens the reduction, so the scan's figure
        // stays an upper bound (the finalists are simulated again as they are).
        for (; next < variants.size() && variants[next].encoder.recompute == config.encoder.recompute &&
               variants[next].llm.recompute == config.llm.recompute;
             ++next) {
          const double sharded = scorer_.checks().memory_shortfall(variants[next], scorer_.partitioner(), tails);
          if (sharded <= 0) return scanned{seconds, variants[next], c.estimate};
          scorer_.checks().note_miss(variants[next], sharded);
        }
        continue;
      }
      return scanned{seconds, config, c.estimate};
    }
    return std::nullopt;
  }

  // Scans the candidates in scoring order within the bound and the budget, then
  // scores the best scanned and `extra_finalists` again; the best that fits.
  [[nodiscard]] std::optional<method_result> search(search_statistics& statistics,
                                                    std::span<const parallel_config> extra_finalists = {}) {
    const planner_options& settings = scorer_.options();
    statistics.candidates = candidates_.candidates.size();
    std::optional<method_result> best;
    progress_bar bar(settings.progress, "planning", candidates_.candidates.size(), settings.progress_interactive);
    std::size_t fitting = 0;      // scanned plans that fit without recomputation
    std::size_t recomputing = 0;  // scanned plans that fit only with it
    std::vector<scanned> finalists;
    batch_options scan_options = settings.batch;
    if (scan_options.order == order_policy::neh) scan_options.order = order_policy::johnson;
    // One recompute count per stage replica and batch ranks the scan's plans at
    // a fraction of the cost of counts per microbatch; finalists get those.
    scan_options.recompute_per_microbatch = false;
    // The fastest scanned seconds, ascending: a candidate over the last of them
    // by the margin on the first half of the batches cannot become a finalist
    // (two spares stand in for finalists whose tail batches will not fit).
    const std::size_t leaders_kept = settings.finalists + 2;
    std::vector<double> leaders;
    const auto give_up_above = [&] {
      return settings.give_up_on_slow && leaders.size() >= leaders_kept ? leaders.back() * (1 + give_up_margin)
                                                                          : std::numeric_limits<double>::infinity();
    };
    for (const std::size_t index : candidates_.scoring_order) {
      const detail::plan_candidate& c = candidates_.candidates[index];
      bar.advance();
      // The final scoring can only shorten the scan's times, so the bound is
      // compared with the scan's best (a bound at or above it cannot win).
      if (best && settings.prune_by_bound && c.lower_bound >= best->iteration_seconds) {
        ++statistics.bound_pruned;
        continue;
      }
      // The budget counts plans that fit; simulations whose tail microbatches
      // turn out not to fit are capped apart, so a memory-tight case still finds plans.
      // Until one plan fits the search goes on: a memory-tight model must not be
      // declared infeasible because the first candidates' tails did not fit.
      // Plans that need recomputation have a budget of their own: they are
      // slower, and letting them use up the main budget would end the scan
      // before the configurations that fit without it (found so: 70B, 64 GPUs).
      const std::size_t budget = settings.max_simulated;
      if (budget != 0 && (fitting >= budget || (fitting + recomputing > 0 && statistics.simulated >= 4 * budget))) {
        ++statistics.over_budget;
        continue;
      }
      auto found = scan_candidate(c, scan_options, statistics, budget == 0 || recomputing < budget, give_up_above());
      if (!found) {
        ++statistics.memory_rejected;
        continue;
      }
      if (found->given_up) {  // counted against the budget like the plan it would likely have been
        ++statistics.given_up;
        ++(recomputes(found->config) ? recomputing : fitting);
        continue;
      }
      // A new best must also pack the tail batches within the memory budget:
      // it prunes others by its time, so it must be a plan that can run.
      bool new_best = !best || found->seconds < best->iteration_seconds;
      if (new_best) {
        const parallel_config scanned_config = found->config;
        if (!fits_tail_batches(found->config)) {
          ++statistics.memory_rejected;
          continue;
        }
        if (!(found->config == scanned_config)) {  // now recomputing every layer: scored again
          ++statistics.simulated;
          const auto again = score_with(found->config, scan_options);
          if (!again) {
            ++statistics.memory_rejected;
            continue;
          }
          found->seconds = *again;
          new_best = !best || found->seconds < best->iteration_seconds;
        }
        found->tails_checked = true;
      }
      ++(recomputes(found->config) ? recomputing : fitting);
      finalists.push_back(*found);
      leaders.insert(std::upper_bound(leaders.begin(), leaders.end(), found->seconds), found->seconds);
      if (leaders.size() > leaders_kept) leaders.pop_back();
      if (new_best) {
        const plan_layout layout = scorer_.layouts().layout_of(found->config, scorer_.partitioner());
        best = method_result{plan_method::dflop, found->config, layout.encoder, layout.llm, c.estimate, found->seconds, true, 0, 0};
      }
    }
    bar.finish();

    // The scan ordered slots with Johnson's rule (one simulation); the few best
    // are scored again with the configured order policy, and the winner's
    // figures are those of that final scoring: what schedule_batch will do.
    // Finalists pack the tail batches within the memory budget (checked here
    // for those the scan did not check).
    std::stable_sort(finalists.begin(), finalists.end(),
                     [](const scanned& a, const scanned& b) { return a.seconds < b.seconds; });
    const std::size_t wanted = std::max<std::size_t>(1, settings.finalists);
    std::size_t kept = 0;
    for (std::size_t f = 0; f < finalists.size() && kept < wanted; ++f) {
      if (finalists[f].tails_checked || fits_tail_batches(finalists[f].config))  // scored again below
        finalists[kept++] = finalists[f];
      else
        ++statistics.memory_rejected;
    }
    finalists.resize(kept);
    for (const parallel_config& config : extra_finalists)
      if (std::none_of(finalists.begin(), finalists.end(), [&](const scanned& f) { return f.config == config; }) &&
          tail_batches_fit(config))
        finalists.push_back({0.0, config, 0.0, true});
    best.reset();
    const auto finals_started = std::chrono::steady_clock::now();
    // Schedule "auto": every candidate schedule scores the finalists (its own
    // memory peaks checked); the best (configuration, schedule) wins.
    const std::size_t schedules = std::max<std::size_t>(1, searched_schedules_.size());
    std::size_t chosen_schedule = 0;
    for (std::size_t s = 0; s < schedules; ++s) {
      if (!searched_schedules_.empty()) use_candidate_schedule(s);
      double schedule_best = 0;
      double schedule_given_up = 0;  // the lowest first-half mean of the finalists given up under it
      for (const scanned& finalist : finalists) {
        // The scan checked the tails under the first schedule; others hold other
        // peaks (and may need every layer recomputed where the scan recomputed some).
        parallel_config config = finalist.config;  // may recompute more layers for this order's tails
        if (s > 0 && !fits_tail_batches(config)) continue;
        const detail::tail_samples typical = scorer_.scoring().typical_microbatches(config);
        const std::array<detail::microbatch_views, 2> quick{typical, scorer_.heaviest_samples()};
        detail::tail_samples tails;
        double seconds = 0;
        try {
          // A pair over 2% slower than the best on the first half of the batches cannot win.
          const double give_up_above = settings.give_up_on_slow && best
                                           ? best->iteration_seconds * (1 + give_up_margin)
                                           : std::numeric_limits<double>::infinity();
          const auto scored = simulate_raising_recomputation(config, settings.batch, quick, tails, nullptr, give_up_above);
          if (!scored.complete) {
            ++statistics.given_up;
            if (schedule_given_up == 0 || scored.seconds < schedule_given_up) schedule_given_up = scored.seconds;
            continue;
          }
          seconds = scored.seconds;
        } catch (const memory_cap_error&) {  // packed in another order, a batch no longer fits
          continue;
        }
        if (scorer_.checks().memory_shortfall(config, scorer_.partitioner(), tails) > 0) continue;  // another slot order, another tail: still must fit
        if (schedule_best == 0 || seconds < schedule_best) schedule_best = seconds;
        if (!best || seconds < best->iteration_seconds) {
          best = finalist_result(config, finalist.estimate, seconds, std::move(tails));
          chosen_schedule = s;
        }
      }
      if (!searched_schedules_.empty())
        statistics.schedules.push_back({searched_schedules_[s], schedule_best > 0 ? schedule_best : schedule_given_up});
    }
    // schedule_batch, the plan's figures and its schedule follow the one chosen.
    if (schedules > 1) use_candidate_schedule(chosen_schedule);
    if (best && settings.encoder_run_ahead) search_encoder_run_ahead(*best);
    statistics.finalist_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - finals_started).count();
    return best;
  }

  // Lets the winner's encoder positions run 2, 8, 32, ... (at most m) forwards
  // further ahead (parallel_config::encoder_run_ahead), each count scored as
  // the finalists were, its tails and memory checked with the deeper in-flight
  // peaks; the fastest is kept.
  // - The gain is not monotone (more encoder microbatches in flight can make a
  //   batch recompute more of its layers: the 72B on 64 GPUs is slower with 2,
  //   faster with 8), so a slower count does not end the search. One given up
  //   (over 2% slower on the first half of the batches) does, and so does one
  //   whose tails do not fit: more in flight holds more memory still.
  // - The tails are checked only for a count that scored faster: packing them
  //   costs several scorings.
  // - Not on a large batch (batch_scheduler::large_order_search): on the 32B,
  //   70B and 72B at 1024 GPUs it cost 2.5-3.4 s of planning and bought at
  //   most 0.04%; the gains were on deep encoder pipelines at 16-64 GPUs
  //   (docs/benchmarks.md).
  void search_encoder_run_ahead(method_result& best) {
    using scheduler = batch_scheduler<Cost, Memory, Packer>;
    if (!best.config.has_encoder() || scheduler::order_search_size(best.config) > scheduler::large_order_search) return;
    const planner_options& settings = scorer_.options();
    // The mean over the sampled batches (`config` may come back recomputing
    // more), or nullopt where it was given up or a batch cannot be packed.
    const auto score = [&](parallel_config& config, detail::tail_samples& tails) -> std::optional<double> {
      const detail::tail_samples typical = scorer_.scoring().typical_microbatches(config);
      const std::array<detail::microbatch_views, 2> quick{typical, scorer_.heaviest_samples()};
      const double give_up_above = settings.give_up_on_slow ? best.iteration_seconds * (1 + give_up_margin)
                                                            : std::numeric_limits<double>::infinity();
      try {
        const auto scored = simulate_raising_recomputation(config, settings.batch, quick, tails, nullptr, give_up_above);
        if (scored.complete) return scored.seconds;
      } catch (const memory_cap_error&) {
      }
      return std::nullopt;
    };
    const int m = best.config.microbatches;
    for (int ahead = 2; ahead <= m; ahead = ahead == m ? m + 1 : std::min(m, ahead * 4)) {
      parallel_config config = best.config;
      config.encoder_run_ahead = ahead;
      detail::tail_samples tails;
      auto seconds = score(config, tails);
      if (!seconds) return;
      if (!(*seconds < best.iteration_seconds)) continue;
      const parallel_config scored = config;
      if (!fits_tail_batches(config)) return;
      if (config != scored) {  // the tails asked for more recomputation: score that
        seconds = score(config, tails);
        if (!seconds) return;
        if (!(*seconds < best.iteration_seconds)) continue;
      }
      if (scorer_.checks().memory_shortfall(config, scorer_.partitioner(), tails) > 0) return;
      best = finalist_result(config, best.estimated_seconds, *seconds, std::move(tails));
    }
  }

  // dflop's result for a finalist `config` that scored `seconds` with
  // `tails`: its layer splits, its peak stage memory with those tails, which
  // become the chosen plan's (`tail_cache_`).
  [[nodiscard]] method_result finalist_result(const parallel_config& config, double estimate, double seconds,
                                              detail::tail_samples tails) {
    const plan_layout layout = scorer_.layouts().layout_of(config, scorer_.partitioner());
    method_result result{plan_method::dflop, config, layout.encoder, layout.llm, estimate, seconds, true, 0, 0};
    result.peak_memory_gib = detail::peak_gib(scorer_.checks().stage_memories(config, scorer_.partitioner(), tails));
    tail_cache_ = std::move(tails);
    return result;
  }

  scorer_type scorer_;
  detail::candidate_list candidates_;
  detail::tail_samples tail_cache_;  // the chosen plan's tail microbatches, for its stage memories
  std::vector<std::string> searched_schedules_;  // schedule "auto": the names make_plan chooses among (else empty)
};

}  // namespace dflop
