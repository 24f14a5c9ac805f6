// SPDX-License-Identifier: Apache-2.0
// Partial activation recomputation (a stage recomputes its first k layers,
// Megatron-LM's block method): its bytes and seconds against closed forms, the
// fewest-layers bisection against a linear scan, and plans that use it.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/plan/detail/candidate_enumeration.hpp>
#include <dflop/plan/detail/plan_scorer.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/schedule/by_name.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

using namespace dflop;

namespace {

using scorer_type =
    detail::plan_scorer<flops_cost_model, analytic_memory_model, min_max_layers, refined_packer, named_schedule>;

// The fewest layers per stage with which `samples` fit, found by trying every
// count from one up (the module's other degrees as in `config`); nullopt when
// none does. All layers is written 0.
std::optional<int> scanned_fewest(scorer_type& scorer, parallel_config config, module_kind kind,
                                  const std::vector<detail::microbatch_views>& samples) {
  module_parallelism& degrees = kind == module_kind::encoder ? config.encoder : config.llm;
  const module_plan plan = scorer.layouts().module_plan_of(kind, degrees, scorer.partitioner());
  std::int64_t most = 0;
  for (int s = 0; s < degrees.pp; ++s) most = std::max(most, plan.slice(s).layers);
  for (std::int64_t k = 1; k <= most; ++k) {
    degrees.recompute_layers = k == most ? 0 : static_cast<int>(k);
    const bool fits = std::all_of(samples.begin(), samples.end(), [&](const detail::microbatch_views& microbatch) {
      return scorer.checks().memory_shortfall(config, scorer.partitioner(), microbatch) <= 0;
    });
    if (fits) return degrees.recompute_layers;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("a stage recomputing k of its layers keeps k inputs and the rest in full", "[cost]") {
  // The hand-computed Qwen2.5-7B first stage (cost_memory_test): 14 layers, TP 2,
  // 4 in flight of 4096 tokens; per token and layer 79,360 bytes in full and
  // 3584 as an input (after TP); the working set 325,058,560 once.
  const analytic_memory_model memory(find_model("siglip-400m+qwen2.5-7b"));
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 4096}};
  const auto slice = layer_range(0, 14, 28);
  for (std::int64_t k = 0; k <= 20; ++k) {
    INFO("k = " << k);
    const std::int64_t recomputed = std::min<std::int64_t>(k == 0 ? 14 : k, 14);
    const std::int64_t expected =
        4LL * 4096 * ((14 - recomputed) * 79'360 + recomputed * 3584) + 325'058'560;
    CHECK(memory.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {true, 1, k}).activations == expected);
    CHECK(recomputed_layers(memory_choices{true, 1, k}, 14) == recomputed);
    // Without recomputation the count means nothing.
    CHECK(memory.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {false, 1, k}).activations ==
          4LL * 4096 * 14 * 79'360);
  }
  CHECK_THROWS_WITH(memory.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {true, 1, -1}),
                    Catch::Contains("recompute_layers must be >= 0 (0: all), got -1"));
  CHECK_THROWS_WITH(
      memory.activation_bytes_recomputing(module_kind::llm, 2, slice, 4, microbatch_shape{1, 4096, 4096.0 * 4096}, 15),
      Catch::Contains("15 recomputed layers of a stage with 14"));
}

TEST_CASE("each recomputed layer adds its forward to the backward", "[cost]") {
  const auto model = find_model("siglip-400m+qwen2.5-7b");
  const flops_cost_model cost(model, find_gpu("h100-80gb"));
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 3000}};
  const module_cost unit = cost.estimate_time(module_kind::llm, 2, microbatch);
  const auto slice = layer_range(0, 14, 28);
  for (std::int64_t k = 0; k <= 14; ++k) {
    const pass_time time = unit.stage_recomputing(slice, k);
    CHECK(time.forward == unit.stage(slice).forward);
    CHECK(time.backward == Approx(unit.stage(slice).backward + static_cast<double>(k) * unit.layer.forward));
  }
  CHECK(unit.stage(slice, true) == unit.stage_recomputing(slice, 14));
  CHECK(unit.stage(slice, false) == unit.stage_recomputing(slice, 0));
  module_parallelism degrees{2, 2, 1, true, false, 5};
  CHECK(recomputed_layers(degrees, 14) == 5);
  CHECK(recomputed_layers(degrees, 3) == 3);
  degrees.recompute_layers = 0;
  CHECK(recomputed_layers(degrees, 14) == 14);
  degrees.recompute = false;
  CHECK(recomputed_layers(degrees, 14) == 0);
}

TEST_CASE("the fewest recomputed layers: bisection against a linear scan", "[plan]") {
  const auto model = test::small_model();
  std::mt19937_64 random(11);
  std::size_t partial = 0, compared = 0;
  for (const std::int64_t memory_gib : {2L, 3L, 4L, 6L}) {
    planner_options options;
    options.global_batch = 48;
    options.batches = 2;
    options.seed = 5;
    const auto cluster = test::small_cluster(8, 4, memory_gib);
    scorer_type scorer(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model), options,
                       min_max_layers{}, refined_packer{}, named_schedule{"1f1b"});
    const auto workload = test::small_workload(400, 2);
    scorer.draw_batches(workload);
    const auto candidates = detail::enumerate_candidates(scorer).candidates;
    REQUIRE_FALSE(candidates.empty());
    for (int trial = 0; trial < 60; ++trial) {
      const parallel_config base = candidates[random() % candidates.size()].config;
      // Random microbatches: runs of consecutive workload samples.
      std::vector<std::vector<sample>> owned;
      for (int i = 0; i < 3; ++i) {
        const std::size_t first = random() % (workload.size() - 8);
        owned.emplace_back(workload.begin() + static_cast<std::ptrdiff_t>(first),
                           workload.begin() + static_cast<std::ptrdiff_t>(first + 1 + random() % 6));
      }
      std::vector<detail::microbatch_views> samples;
      for (std::size_t i = 0; i + 1 < owned.size(); ++i) samples.push_back({owned[i], owned[i + 1]});
      for (const auto& [encoder, llm] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
        parallel_config config = base;
        config.encoder.recompute = encoder;
        config.llm.recompute = llm;
        INFO(memory_gib << " GiB, " << config);
        const auto found = scorer.checks().fewest_recomputed_layers(config, scorer.partitioner(), samples);
        // Each module alone (the other at full recomputation or none, as configured).
        std::optional<parallel_config> expected = config;
        for (module_kind kind : all_module_kinds) {
          if (!(kind == module_kind::encoder ? encoder : llm) || !expected) continue;
          const auto k = scanned_fewest(scorer, *expected, kind, samples);
          if (!k) expected.reset();
          else (kind == module_kind::encoder ? expected->encoder : expected->llm).recompute_layers = *k;
        }
        REQUIRE(found.has_value() == expected.has_value());
        ++compared;
        if (!found) continue;
        CHECK(*found == *expected);
        if (found->encoder.recompute_layers > 0 || found->llm.recompute_layers > 0) ++partial;
        // Never fewer than asked: a count already set is a floor.
        const auto again = scorer.checks().fewest_recomputed_layers(*found, scorer.partitioner(), samples);
        REQUIRE(again.has_value());
        CHECK(*again == *found);
      }
    }
  }
  INFO(partial << " of " << compared);
  CHECK(partial > 10);  // the cases cover partial recomputation, not only all or nothing
}

TEST_CASE("a plan that recomputes part of its layers fits, is faster than full recomputation, and says so",
          "[plan]") {
  const auto model = test::small_model();
  const auto workload = test::small_workload();
  std::size_t partial_plans = 0;
  for (const std::int64_t memory_gib : {3L, 4L, 5L, 6L, 8L}) {
    planner_options options;
    options.global_batch = 48;
    options.batches = 2;
    // The plan's own count, every batch at it: data-aware recomputation
    // (plan_batch_recompute_test) lowers it per batch, and then a fully
    // recomputing plan, lowered the same way, can tie with a partial one.
    options.batch.recompute_per_batch = false;
    const auto cluster = test::small_cluster(8, 4, memory_gib);
    planner<flops_cost_model, analytic_memory_model> search(model, cluster, flops_cost_model(model, cluster.gpu),
                                                            analytic_memory_model(model), options);
    plan result = [&] {
      try {
        return search.make_plan(workload);
      } catch (const dflop::error&) {  // too small for any plan
        return plan{};
      }
    }();
    const parallel_config& chosen = result.chosen.config;
    if (!(chosen.encoder.recompute_layers > 0 || chosen.llm.recompute_layers > 0)) continue;
    ++partial_plans;
    INFO(memory_gib << " GiB: " << chosen);
    for (const auto& stage : result.memory)
      CHECK(static_cast<double>(stage.bytes.total()) <= static_cast<double>(memory_gib << 30) * 0.9);
    const auto partly = search.score(chosen);
    const auto fully = search.score(fully_recomputing(chosen));
    REQUIRE(partly.has_value());
    REQUIRE(fully.has_value());
    CHECK(*partly < *fully);
    // The plan file keeps the count and reads it back.
    const auto json = to_json(result);
    const auto& module = chosen.llm.recompute_layers > 0 ? json["config"]["llm"] : json["config"]["encoder"];
    CHECK(module["recompute_layers"] ==
          (chosen.llm.recompute_layers > 0 ? chosen.llm.recompute_layers : chosen.encoder.recompute_layers));
    CHECK(parse_plan_json(json.dump()).chosen.config == chosen);
    // Each rank's stage is told how many of its layers to recompute.
    const plan_layout layout = make_plan_layout(result, plan_method::dflop, named_schedule(result.schedule));
    for (int rank = 0; rank < chosen.gpus(); ++rank) {
      const stage_assignment stage = assignment_of(layout, rank);
      const int k = stage.degrees.recompute ? stage.degrees.recompute_layers : -1;
      CHECK(stage.recompute_first_layers ==
            (k < 0 ? 0 : k == 0 ? stage.slice.layers : std::min<std::int64_t>(k, stage.slice.layers)));
    }
  }
  CHECK(partial_plans > 0);
}
