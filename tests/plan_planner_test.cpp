// SPDX-License-Identifier: Apache-2.0
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>

#include <catch2/catch.hpp>

#include <set>

using dflop::analytic_memory_model;
using dflop::flops_cost_model;
using dflop::parallel_config;
using small_planner = dflop::planner<flops_cost_model, analytic_memory_model>;

namespace {

//! The analytic memory model without per-call choices: the planner cannot turn on memory savers.
struct memory_without_choices {
  analytic_memory_model inner;
  [[nodiscard]] dflop::memory_breakdown estimate_memory(dflop::module_kind kind, int tp, dflop::stage_slice slice,
                                                        int in_flight, std::span<const dflop::sample> mb) const {
    return inner.estimate_memory(kind, tp, slice, in_flight, mb);
  }
};

small_planner make_planner(const dflop::multimodal_spec& model, const dflop::cluster_spec& cluster,
                           dflop::planner_options options) {
  return small_planner(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model), options);
}

dflop::planner_options small_options() {
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.seed = 5;
  options.baselines = false;
  options.batch.order_budget = 8;
  return options;
}

}  // namespace

TEST_CASE("module degrees enumerate exactly the valid (tp, pp, dp) triples", "[plan]") {
  for (int gpus = 1; gpus <= 24; ++gpus)
    for (int per_node : {1, 2, 4, 8}) {
      const auto found = dflop::module_parallelisms(gpus, per_node, 12, 6);
      std::set<std::tuple<int, int, int>> expected;
      for (int tp = 1; tp <= gpus; ++tp)
        for (int pp = 1; pp <= gpus; ++pp)
          for (int dp = 1; dp <= gpus; ++dp)
            if (tp * pp * dp == gpus && per_node % tp == 0 && 12 % tp == 0 && pp <= 6) expected.insert({tp, pp, dp});
      std::set<std::tuple<int, int, int>> got;
      for (const auto& d : found) got.insert({d.tp, d.pp, d.dp});
      CHECK(got == expected);
      CHECK(got.size() == found.size());
    }
}

TEST_CASE("the pruned search returns the brute-force best on a small cluster", "[plan][heavy]") {
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4, 24);
  const auto workload = dflop::test::small_workload();
  auto options = small_options();
  options.max_simulated = 0;  // no budget: only the (valid) bound may skip candidates
  options.give_up_on_slow = false;  // a heuristic: the default budget below keeps it

  auto brute = make_planner(model, cluster, options);
  brute.prepare(workload);
  double best = std::numeric_limits<double>::infinity();
  parallel_config best_config;
  std::size_t feasible = 0;
  // Each candidate counts with its first memory variant that fits (the search's rule).
  for (const parallel_config& candidate : brute.candidates())
    for (const parallel_config& config : brute.memory_variants(candidate))
      if (auto seconds = brute.score(config)) {
        ++feasible;
        if (*seconds < best) best = *seconds, best_config = config;
        break;
      }
  REQUIRE(feasible > 0);
  REQUIRE(feasible < brute.candidates().size());  // the 24 GiB GPU rules some out: memory is exercised

  auto pruned = make_planner(model, cluster, options);
  const auto result = pruned.make_plan(workload);
  CHECK(result.chosen.iteration_seconds == Approx(best).epsilon(1e-12));
  CHECK(result.chosen.config == best_config);
  CHECK(result.search.bound_pruned > 0);
  CHECK(result.search.simulated < result.search.candidates);

  // The default budget still finds it on this small case.
  auto budgeted = make_planner(model, cluster, small_options());
  CHECK(budgeted.make_plan(workload).chosen.iteration_seconds == Approx(best).epsilon(1e-12));
}

TEST_CASE("giving up on slow candidates after half the batches keeps the plan", "[plan]") {
  const auto model = dflop::test::small_model();
  const auto workload = dflop::test::small_workload();
  std::size_t given_up = 0;
  for (int gpus : {8, 16})
    for (std::uint64_t seed : {1U, 2U, 3U}) {
      auto options = small_options();
      options.batches = 4;
      options.seed = seed;
      options.give_up_on_slow = false;
      const auto cluster = dflop::test::small_cluster(gpus, 4);
      const auto whole = make_planner(model, cluster, options).make_plan(workload);
      options.give_up_on_slow = true;
      const auto halved = make_planner(model, cluster, options).make_plan(workload);
      INFO(gpus << " GPUs, seed " << seed);
      CHECK(whole.search.given_up == 0);
      CHECK(halved.chosen == whole.chosen);
      CHECK(halved.search.simulated <= whole.search.simulated);
      given_up += halved.search.given_up;
    }
  CHECK(given_up > 0);  // the cases exercise it
}

TEST_CASE("plans are deterministic for a seed", "[plan]") {
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload();
  auto options = small_options();
  options.baselines = true;
  auto first = make_planner(model, cluster, options).make_plan(workload);
  auto second = make_planner(model, cluster, options).make_plan(workload);
  CHECK(first.chosen == second.chosen);
  CHECK(first.memory == second.memory);
  CHECK(first.baselines == second.baselines);
  CHECK(first.ideal_seconds == second.ideal_seconds);
  // Batches are scored on several threads; the count changes nothing.
  for (unsigned threads : {1U, 3U}) {
    options.threads = threads;
    auto threaded = make_planner(model, cluster, options).make_plan(workload);
    CHECK(threaded.chosen == first.chosen);
    CHECK(threaded.baselines == first.baselines);
  }
}

TEST_CASE("the plan beats both baselines and never beats the ideal", "[plan]") {
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(16, 8);
  const auto workload = dflop::test::small_workload(600, 3);
  auto options = small_options();
  options.global_batch = 64;
  options.baselines = true;
  const auto result = make_planner(model, cluster, options).make_plan(workload);
  REQUIRE(result.baselines.size() == 2);
  for (const auto& baseline : result.baselines) {
    INFO(baseline.method);
    CHECK(baseline.fits_memory);
    CHECK(result.chosen.iteration_seconds <= baseline.iteration_seconds * (1 + 1e-12));
  }
  CHECK(result.ideal_seconds < result.chosen.iteration_seconds);
  CHECK(result.chosen.config.gpus() == 16);
  const auto json = dflop::to_json(result);
  for (const char* key : {"config", "iteration_seconds", "samples_per_second", "memory_gib", "ideal_seconds", "baselines"})
    CHECK(json.contains(key));
  CHECK(json["baselines"].contains("data_blind"));
  CHECK(json["baselines"].contains("dflop_reference"));
  CHECK(json["config"]["llm"]["layers"].size() == static_cast<std::size_t>(result.chosen.config.llm.pp));
}

TEST_CASE("memory of the chosen plan fits and counts in-flight microbatches", "[plan]") {
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4, 24);
  const auto workload = dflop::test::small_workload();
  const auto result = make_planner(model, cluster, small_options()).make_plan(workload);
  const double usable = 24.0 * (1 << 30) * 0.9;
  REQUIRE(result.memory.size() == static_cast<std::size_t>(result.chosen.config.stages()));
  for (std::size_t p = 0; p < result.memory.size(); ++p) {
    CHECK(static_cast<double>(result.memory[p].bytes.total()) <= usable);
    // 1F1B: position p of S keeps min(S - p, m) microbatches in flight.
    const int stages = result.chosen.config.stages();
    CHECK(result.memory[p].in_flight == std::min(stages - static_cast<int>(p), result.chosen.config.microbatches));
  }
}

TEST_CASE("an impossible cluster names the closest configuration and its shortfall", "[plan]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-72b");
  const auto cluster = dflop::test::small_cluster(4, 4);
  const auto workload = dflop::test::small_workload();
  auto planner = make_planner(model, cluster, small_options());
  try {
    (void)planner.make_plan(workload);
    FAIL("72B on four 80 GiB GPUs must not fit");
  } catch (const dflop::infeasible_error& e) {
    const std::string text = e.what();
    CHECK_THAT(text, Catch::Contains("no configuration of siglip-400m+qwen2.5-72b on 4 x h100-80gb fits"));
    CHECK_THAT(text, Catch::Contains("closest: encoder(tp"));
    CHECK_THAT(text, Catch::Contains("GiB on its fullest stage"));
  }
}

TEST_CASE("bad planner inputs are rejected with the parameter that was wrong", "[plan]") {
  const auto model = dflop::test::small_model();
  auto options = small_options();
  CHECK_THROWS_WITH(make_planner(model, dflop::test::small_cluster(1, 1), options), Catch::Contains("cluster_spec::gpus: need at least 2 GPUs"));
  CHECK_THROWS_WITH(make_planner(model, dflop::test::small_cluster(12, 8), options),
                    Catch::Contains("do not fill whole nodes"));
  options.global_batch = 0;
  CHECK_THROWS_WITH(make_planner(model, dflop::test::small_cluster(8, 4), options), Catch::Contains("planner_options::global_batch: must be at least 1"));
  options = small_options();
  auto planner = make_planner(model, dflop::test::small_cluster(8, 4), options);
  const auto few = dflop::test::small_workload(10);
  CHECK_THROWS_WITH(planner.make_plan(few), Catch::Contains("10 samples cannot fill a global batch of 32"));
}

TEST_CASE("recomputation is turned on only where a configuration does not fit without it; the distributed "
          "optimizer wherever a module has replicas",
          "[plan]") {
  const auto model = dflop::test::small_model();
  const auto workload = dflop::test::small_workload();
  const auto options = small_options();
  STATIC_REQUIRE_FALSE(dflop::memory_model_with_choices<memory_without_choices>);
  const auto plain_planner = [&](const dflop::cluster_spec& cluster) {
    return dflop::planner<flops_cost_model, memory_without_choices>(
        model, cluster, flops_cost_model(model, cluster.gpu), memory_without_choices{analytic_memory_model(model)},
        options);
  };
  // The smallest GPU (whole GiB) on which some plan fits without savers.
  int plain_fits = 0;
  for (int gib = 1; gib <= 24 && plain_fits == 0; ++gib) {
    auto planner = plain_planner(dflop::test::small_cluster(8, 4, gib));
    try {
      (void)planner.make_plan(workload);
      plain_fits = gib;
    } catch (const dflop::infeasible_error&) {       // tail microbatches do not fit
    } catch (const dflop::unfittable_samples_error&) {  // some samples do not fit even alone
    }
  }
  REQUIRE(plain_fits > 1);
  const auto tight = dflop::test::small_cluster(8, 4, plain_fits - 1);
  auto without = plain_planner(tight);
  CHECK_THROWS_MATCHES(without.make_plan(workload), dflop::error, Catch::Predicate<dflop::error>([](const auto& e) {
                         return dynamic_cast<const dflop::infeasible_error*>(&e) != nullptr ||
                                dynamic_cast<const dflop::unfittable_samples_error*>(&e) != nullptr;
                       }));

  // With savers the same GPU runs, and the plan says which it uses.
  auto with = make_planner(model, tight, options);
  const auto result = with.make_plan(workload);
  const auto& chosen = result.chosen.config;
  const bool saves = chosen.encoder.recompute || chosen.llm.recompute || chosen.encoder.distributed_optimizer ||
                     chosen.llm.distributed_optimizer;
  CHECK(saves);
  // The distributed optimizer is on exactly where a module has replicas: it holds less and runs faster.
  CHECK(chosen.encoder.distributed_optimizer == (chosen.encoder.dp > 1));
  CHECK(chosen.llm.distributed_optimizer == (chosen.llm.dp > 1));
  for (const parallel_config& variant : with.memory_variants(dflop::without_memory_savers(chosen))) {
    CHECK(variant.encoder.distributed_optimizer == (variant.encoder.dp > 1));
    CHECK(variant.llm.distributed_optimizer == (variant.llm.dp > 1));
  }
  CHECK(result.chosen.encoder.degrees == chosen.encoder);
  CHECK(result.chosen.llm.degrees == chosen.llm);
  for (const auto& stage : result.memory)
    CHECK(static_cast<double>(stage.bytes.total()) <= (plain_fits - 1.0) * (1 << 30) * 0.9);
  // The chosen variant is the first of its base configuration's variants that
  // fits (recomputing perhaps fewer layers than the variant's all).
  for (const parallel_config& variant : with.memory_variants(dflop::without_memory_savers(chosen))) {
    if (variant == dflop::fully_recomputing(chosen)) break;
    CHECK_FALSE(with.score(variant).has_value());
  }
  const auto json = dflop::to_json(result);
  CHECK(json["config"]["llm"]["recompute"] == chosen.llm.recompute);
  CHECK(json["config"]["encoder"]["distributed_optimizer"] == chosen.encoder.distributed_optimizer);

  // Recomputation costs time: the same configuration scores slower with it,
  // when every batch recomputes the plan's count...
  auto planned_options = options;
  planned_options.batch.recompute_per_batch = false;
  auto roomy = make_planner(model, dflop::test::small_cluster(8, 4), planned_options);
  roomy.prepare(workload);
  parallel_config fast{{1, 1, 2}, {1, 2, 3}, 4};
  parallel_config recomputing = fast;
  recomputing.llm.recompute = true;
  CHECK(*roomy.score(recomputing) > *roomy.score(fast));
  // ... and none when batches choose their own counts: on a roomy GPU nothing needs recomputing.
  auto roomy_per_batch = make_planner(model, dflop::test::small_cluster(8, 4), options);
  roomy_per_batch.prepare(workload);
  CHECK(*roomy_per_batch.score(recomputing) == *roomy_per_batch.score(fast));
  // The distributed optimizer is faster where the LLM has replicas: half the
  // all-reduce's traffic after the last op, the other half (the gather) before a
  // first op that waits for the encoder anyway.
  parallel_config sharded = fast;
  sharded.llm.distributed_optimizer = true;
  CHECK(*roomy.score(sharded) < *roomy.score(fast));
}
