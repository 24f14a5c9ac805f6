// SPDX-License-Identifier: Apache-2.0
// The baselines' lazy mean-sample ranking against brute force: every candidate's
// first memory variant the method's rule accepts, its estimate computed directly
// ((m + S - 1) x the slowest even-split stage with mean-sample microbatches),
// stably sorted. The lazy ranking must give the same sequence, all the way down.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/detail/baselines.hpp>
#include <dflop/plan/detail/candidate_enumeration.hpp>
#include <dflop/plan/detail/plan_scorer.hpp>
#include <dflop/schedule/by_name.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

using namespace dflop;

namespace {

using scorer_type =
    detail::plan_scorer<flops_cost_model, analytic_memory_model, min_max_layers, refined_packer, named_schedule>;

struct ranked {
  parallel_config config;
  double estimate;
};

// Prices one module's slowest stage from scratch (no caches).
double slowest_stage(scorer_type& scorer, module_kind kind, const module_parallelism& degrees, std::size_t count) {
  const std::vector<sample> microbatch(count, scorer.mean_sample());
  const module_cost cost = scorer.cost().estimate_time(kind, degrees.tp, microbatch);
  const module_plan plan = scorer.layouts().module_plan_of(kind, degrees, even_layers{});
  double slowest = 0;
  for (int s = 0; s < degrees.pp; ++s) slowest = std::max(slowest, cost.stage(plan.slice(s), degrees.recompute).total());
  return slowest;
}

std::vector<ranked> brute_force(scorer_type& scorer, const std::vector<detail::plan_candidate>& candidates,
                                plan_method method) {
  const double batch = scorer.options().global_batch;
  const sample mean = scorer.mean_sample();
  std::vector<ranked> all;
  for (const auto& c : candidates) {
    const auto per_bin = static_cast<std::size_t>(std::max(1L, std::lround(batch / c.config.bins())));
    const auto per_part =
        static_cast<std::size_t>(std::max(1L, std::lround(batch / (c.config.encoder.dp * c.config.microbatches))));
    const auto merged = [&](std::size_t k) {
      const auto n = static_cast<std::int64_t>(k);
      return sample{"merged", mean.kind, n * mean.encoder_items, n * mean.encoder_tokens, n * mean.llm_tokens};
    };
    const sample llm_tail = merged(per_bin), encoder_tail = merged(per_part);
    const detail::microbatch_views tails{{&llm_tail, 1}, {&encoder_tail, 1}};
    for (const parallel_config& config : scorer.checks().memory_variants(c.config)) {
      const double shortfall = method == plan_method::dflop_reference
                                   ? scorer.checks().reference_memory_shortfall(config, tails)
                                   : scorer.checks().memory_shortfall(config, even_layers{}, tails);
      if (shortfall > 0) continue;
      const double slowest = std::max(slowest_stage(scorer, module_kind::encoder, config.encoder, per_part),
                                      slowest_stage(scorer, module_kind::llm, config.llm, per_bin));
      all.push_back({config, (config.microbatches + config.stages() - 1) * slowest});
      break;
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const ranked& a, const ranked& b) { return a.estimate < b.estimate; });
  return all;
}

}  // namespace

TEST_CASE("the lazy mean-sample ranking gives the brute-force order", "[plan]") {
  const auto model = test::small_model();
  for (const auto& [gpus, memory_gib, global_batch] :
       {std::tuple{8, 80L, 32}, std::tuple{8, 6L, 64}, std::tuple{16, 4L, 48}, std::tuple{12, 10L, 24}}) {
    INFO(gpus << " GPUs, " << memory_gib << " GiB, global batch " << global_batch);
    planner_options options;
    options.global_batch = global_batch;
    options.batches = 2;
    options.seed = 3;
    const auto cluster = test::small_cluster(gpus, 4, memory_gib);
    scorer_type scorer(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model), options,
                       min_max_layers{}, refined_packer{}, named_schedule{"1f1b"});
    scorer.draw_batches(test::small_workload(400, 2));
    const auto candidates = detail::enumerate_candidates(scorer).candidates;
    REQUIRE_FALSE(candidates.empty());
    std::size_t with_savers = 0, rejected_somewhere = 0;
    for (const auto method : {plan_method::data_blind, plan_method::dflop_reference}) {
      const auto expected = brute_force(scorer, candidates, method);
      rejected_somewhere += candidates.size() - expected.size();
      detail::mean_ranking<scorer_type> ranking(scorer, candidates, method);
      std::size_t i = 0;
      while (auto next = ranking.next()) {
        REQUIRE(i < expected.size());
        CHECK(next->config == expected[i].config);
        CHECK(next->estimated_seconds == expected[i].estimate);
        with_savers += next->config.encoder.recompute || next->config.llm.recompute ? 1 : 0;
        ++i;
      }
      CHECK(i == expected.size());
    }
    // The tight cases exercise what makes the ranking lazy: savers and rejections.
    if (memory_gib <= 6) CHECK(with_savers + rejected_somewhere > 0);
  }
}
