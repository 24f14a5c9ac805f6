// SPDX-License-Identifier: Apache-2.0
//! \file
//! The plan search's candidates: every split of the GPUs into encoder and LLM
//! GPUs, every (tp, pp, dp) per module and every microbatch count, each with two
//! analytic estimates and a lower bound on its simulated time, and the order in
//! which the search scores them.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/plan/cluster.hpp>
#include <dflop/plan/module_plan.hpp>
#include <dflop/plan/parallel_config.hpp>
#include <dflop/plan/planner_options.hpp>
#include <dflop/plan/rank_layout.hpp>
#include <dflop/sim/costs.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace dflop::detail {

//! One configuration the search may score, with what it knows before simulating.
struct plan_candidate {
  parallel_config config;          //!< degrees per module and microbatches
  double estimate = 0;             //!< 1F1B fill/drain + bottleneck estimate with mean microbatches
  double bottleneck_estimate = 0;  //!< (m + S - 1) x slowest stage, the reference's formula
  double lower_bound = 0;          //!< no simulated score of this configuration is below it
};

//! Every candidate and the order the search scores them in.
struct candidate_list {
  std::vector<plan_candidate> candidates;  //!< in enumeration order
  std::vector<std::size_t> scoring_order;  //!< candidate indices in the order the search scores them
};

//! Enumerates and estimates the candidates of a `plan_scorer`'s model and
//! cluster; keeps the per-(module, degrees) figures it reuses for one enumeration.
template <class Scorer>
class candidate_enumerator {
public:
  //! Enumerates with `scorer`'s options, batches and layer split.
  explicit candidate_enumerator(Scorer& scorer) : scorer_(scorer) {}

  //! Every candidate, estimated and bounded, and the scoring order.
  [[nodiscard]] candidate_list enumerate() {
    candidate_list list;
    auto& candidates = list.candidates;
    const multimodal_spec& model = scorer_.model();
    const cluster_spec& cluster = scorer_.cluster();
    const int gpus = cluster.gpus;
    for (int encoder_gpus = 1; encoder_gpus < gpus; ++encoder_gpus) {
      const auto encoder_options = module_parallelisms(encoder_gpus, cluster.gpus_per_node, model.encoder.heads,
                                                       static_cast<int>(model.encoder.layers));
      const auto llm_options = module_parallelisms(gpus - encoder_gpus, cluster.gpus_per_node, model.llm.kv_heads,
                                                   static_cast<int>(model.llm.layers));
      for (const auto& encoder : encoder_options) {
        const module_info& encoder_info = info_of(module_kind::encoder, encoder);
        for (const auto& llm : llm_options) {
          const module_info& llm_info = info_of(module_kind::llm, llm);
          const double bound = std::max(encoder_info.lower_bound, llm_info.lower_bound);
          for (int m : microbatch_counts(llm.dp)) {
            plan_candidate c{{encoder, llm, m}, 0, 0, bound};
            std::tie(c.estimate, c.bottleneck_estimate) = estimate(c.config, encoder_info, llm_info);
            candidates.push_back(c);
          }
        }
      }
    }
    // Scoring order: the two estimates' rankings interleaved. Neither estimate
    // sees the cross-replica waits a simulation finds, and they err differently,
    // so a small simulation budget spent on both finds good plans more reliably.
    std::vector<std::size_t> by_estimate(candidates.size());
    std::iota(by_estimate.begin(), by_estimate.end(), std::size_t{0});
    std::vector<std::size_t> by_bottleneck = by_estimate;
    std::stable_sort(by_estimate.begin(), by_estimate.end(),
                     [&](std::size_t a, std::size_t b) { return candidates[a].estimate < candidates[b].estimate; });
    std::stable_sort(by_bottleneck.begin(), by_bottleneck.end(), [&](std::size_t a, std::size_t b) {
      return candidates[a].bottleneck_estimate < candidates[b].bottleneck_estimate;
    });
    std::vector<char> queued(candidates.size(), 0);
    for (std::size_t i = 0; i < candidates.size(); ++i)
      for (std::size_t index : {by_estimate[i], by_bottleneck[i]})
        if (!queued[index]) {
          queued[index] = 1;
          list.scoring_order.push_back(index);
        }
    return list;
  }

private:
  // What the enumeration needs of one module's degrees, computed once per degrees.
  struct module_info {
    module_plan plan;          // degrees and the partitioner's layer split
    double lower_bound = 0;    // max over stages of the whole batch's stage work / dp
    double gradient_sync = 0;  // slowest stage's gradient all-reduce
  };

  [[nodiscard]] std::vector<int> microbatch_counts(int llm_dp) const {
    const planner_options& options = scorer_.options();
    const int most = options.global_batch / llm_dp;
    std::vector<int> counts;
    if (!options.microbatch_counts.empty()) {
      for (int m : options.microbatch_counts)
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

  // The mean cost of one of `parts` microbatches cut in arrival order from the
  // first batch. Beyond `most_priced` parts an evenly spaced `most_priced` of them
  // are priced: thousands of distinct part counts (1024 GPUs) would otherwise
  // each price the whole batch; spaced chunks keep the mean unbiased.
  [[nodiscard]] const module_cost& mean_bin(module_kind kind, int tp, int parts) {
    constexpr int most_priced = 512;
    const auto key = std::make_tuple(kind, tp, parts);
    if (auto found = mean_bins_.find(key); found != mean_bins_.end()) return found->second;
    const auto& batch = scorer_.batches().front();
    module_cost sum;
    const std::size_t n = batch.size();
    const int priced = std::min(parts, most_priced);
    for (int i = 0; i < priced; ++i) {
      const int part = static_cast<int>(static_cast<std::int64_t>(i) * parts / priced);
      const std::size_t begin = n * static_cast<std::size_t>(part) / static_cast<std::size_t>(parts);
      const std::size_t end = n * static_cast<std::size_t>(part + 1) / static_cast<std::size_t>(parts);
      const module_cost one =
          scorer_.cost().estimate_time(kind, tp, std::span<const sample>(batch).subspan(begin, end - begin));
      sum.layer = sum.layer + one.layer;
      sum.embedding = sum.embedding + one.embedding;
      sum.head = sum.head + one.head;
    }
    const double scale = 1.0 / priced;
    return mean_bins_.emplace(key, module_cost{scale * sum.layer, scale * sum.embedding, scale * sum.head}).first->second;
  }

  // Valid lower bound on any simulated iteration: some replica of every stage
  // carries at least its share (1/dp) of the whole batch's work on that stage.
  [[nodiscard]] const module_info& info_of(module_kind kind, const module_parallelism& d) {
    const auto key = std::make_tuple(kind, d.tp, d.pp, d.dp);
    if (auto found = module_infos_.find(key); found != module_infos_.end()) return found->second;
    module_info info{scorer_.layouts().module_plan_of(kind, d, scorer_.partitioner()), 0, 0};
    const module_cost& whole = scorer_.layouts().batch_cost(kind, d.tp);
    // A configuration whose placement puts this module's data-parallel group
    // across nodes pays the network; the module's own degrees decide that.
    parallel_config placement;
    (kind == module_kind::encoder ? placement.encoder : placement.llm) = d;
    const rank_layout ranks(placement, scorer_.cluster());
    for (int s = 0; s < d.pp; ++s) {
      info.lower_bound = std::max(info.lower_bound, whole.stage(info.plan.slice(s)).total() / d.dp);
      const double bytes =
          static_cast<double>(scorer_.memory().estimate_memory(kind, d.tp, info.plan.slice(s), 0, {}).gradients);
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

  Scorer& scorer_;
  std::map<std::tuple<module_kind, int, int>, module_cost> mean_bins_;
  std::map<std::tuple<module_kind, int, int, int>, module_info> module_infos_;
};

//! The candidates of `scorer`'s model and cluster and their scoring order
//! (after `scorer.draw_batches`).
template <class Scorer>
[[nodiscard]] candidate_list enumerate_candidates(Scorer& scorer) {
  return candidate_enumerator<Scorer>(scorer).enumerate();
}

}  // namespace dflop::detail
