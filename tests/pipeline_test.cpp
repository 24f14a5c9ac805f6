// SPDX-License-Identifier: Apache-2.0
#include "exec_multimodal_support.hpp"
#include "plan_test_support.hpp"

#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/exec/plan_runner.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/plan/pack/from_assignment.hpp>
#include <dflop/exec/inproc_communicator.hpp>
#include <dflop/schedule/gpipe.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

namespace {

//! A user cost model: time proportional to tokens (and attention), nothing else.
struct token_cost_model {
  token_cost_model(const dflop::multimodal_spec&, const dflop::gpu_spec&) {}
  dflop::module_cost estimate_time(dflop::module_kind kind, int tp, std::span<const dflop::sample> microbatch) const {
    const auto shape = dflop::shape_of(kind, microbatch);
    const double seconds = (shape.tokens * 1e-6 + shape.squared_tokens * 1e-11) / tp;
    return {{seconds, 2 * seconds}, {seconds / 10, seconds / 5}, {seconds / 4, seconds / 2}};
  }
};
static_assert(dflop::cost_model<token_cost_model>);

//! A user packer: round-robin over samples sorted by their summed cost.
struct sorted_round_robin_packer {
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "sorted-round-robin"; }
  void pack(const dflop::cost_matrix& costs, std::size_t bins, const dflop::pack_options&, dflop::pack_workspace&,
            dflop::packing& result) const {
    std::vector<std::size_t> order(costs.samples());
    std::iota(order.begin(), order.end(), 0);
    const auto total = [&](std::size_t i) {
      const auto row = costs.row(i);
      return std::accumulate(row.begin(), row.end(), 0.0);
    };
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return total(a) > total(b); });
    std::vector<std::size_t> bin_of(costs.samples());
    for (std::size_t rank = 0; rank < order.size(); ++rank) bin_of[order[rank]] = rank % bins;
    dflop::packing_from_assignment(costs, bins, bin_of, result);
  }
};
static_assert(dflop::packer<sorted_round_robin_packer>);

dflop::planner_options quick_options() {
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.baselines = false;
  options.batch.order_budget = 8;
  return options;
}

}  // namespace

TEST_CASE("the default pipeline composes the shipped policies", "[pipeline]") {
  using default_pipeline = dflop::pipeline<>;
  STATIC_REQUIRE(std::is_same_v<default_pipeline::cost_model_type, dflop::flops_cost_model>);
  STATIC_REQUIRE(std::is_same_v<default_pipeline::packer_type, dflop::refined_packer>);
  STATIC_REQUIRE(std::is_same_v<default_pipeline::partitioner_type, dflop::min_max_layers>);
  STATIC_REQUIRE(std::is_same_v<default_pipeline::schedule_type, dflop::one_f_one_b>);
  // The runner runs the pipeline's own schedule policy over the multimodal executor.
  using runner = default_pipeline::runner<dflop::inproc_communicator, dflop::test::toy_encoder_stage,
                                          dflop::test::toy_llm_stage>;
  STATIC_REQUIRE(std::is_same_v<runner, dflop::plan_runner<dflop::one_f_one_b, dflop::inproc_communicator,
                                                           dflop::test::toy_encoder_stage, dflop::test::toy_llm_stage>>);
  STATIC_REQUIRE(std::is_same_v<runner::executor_type,
                                dflop::multimodal_executor<dflop::inproc_communicator, dflop::test::toy_encoder_stage,
                                                           dflop::test::toy_llm_stage>>);

  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload();
  const auto plan = default_pipeline::make_plan(workload, model, cluster, quick_options());
  CHECK(plan.schedule == "1f1b");

  // schedule_batch reproduces the planner's prediction for a batch it scored.
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model, dflop::min_max_layers, dflop::refined_packer,
                 dflop::one_f_one_b>
      search(model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model),
             quick_options());
  const auto same = search.make_plan(workload);
  double mean = 0;
  for (std::size_t b = 0; b < search.sampled_batches().size(); ++b)
    mean += default_pipeline::schedule_batch(plan, search.sampled_batches()[b], quick_options().seed + b)
                .predicted_seconds;
  mean /= static_cast<double>(search.sampled_batches().size());
  CHECK(mean == Approx(plan.chosen.iteration_seconds).epsilon(1e-12));
  CHECK(same.chosen == plan.chosen);
}

TEST_CASE("a user-defined cost model and packer plug into the pipeline type", "[pipeline]") {
  using user_pipeline = dflop::pipeline<token_cost_model, dflop::even_layers, sorted_round_robin_packer, dflop::gpipe>;
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload();
  const auto plan = user_pipeline::make_plan(workload, model, cluster, quick_options());
  CHECK(plan.schedule == "gpipe");
  const auto batch = dflop::sample_batch(workload, 32, dflop::batch_mode::without_replacement, 9);
  const auto scheduled = user_pipeline::schedule_batch(plan, batch);

  // Every sample lands in exactly one LLM microbatch; none is empty.
  std::vector<int> seen(batch.size(), 0);
  for (const auto& microbatch : scheduled.llm_microbatches) {
    CHECK_FALSE(microbatch.empty());
    for (auto i : microbatch) ++seen[i];
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  CHECK(scheduled.predicted_seconds > 0);
  // Even layer split: the user's partitioner was used.
  const auto& llm = plan.chosen.llm;
  for (int s = 0; s + 1 < llm.degrees.pp; ++s) CHECK(llm.slice(s).layers >= llm.slice(s + 1).layers);
}

TEST_CASE("policies with settings are passed as values; baselines are scheduled as their methods run", "[pipeline]") {
  using named_pipeline = dflop::pipeline<dflop::flops_cost_model, dflop::min_max_layers, dflop::refined_packer,
                                         dflop::named_schedule>;
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload();
  auto options = quick_options();
  options.baselines = true;
  const named_pipeline::policies zero_bubble{.schedule = dflop::named_schedule("zb-h1")};
  const auto plan = named_pipeline::make_plan(workload, model, cluster, options, zero_bubble);
  CHECK(plan.schedule == "zb-h1");
  const auto batch = dflop::sample_batch(workload, 32, dflop::batch_mode::without_replacement, 4);

  // The default-constructed policy (1f1b) is not the plan's schedule: refused, not silently run.
  CHECK_THROWS_WITH(named_pipeline::schedule_batch(plan, batch),
                    Catch::Contains("made for schedule 'zb-h1'") && Catch::Contains("'1f1b'"));
  const auto ours = named_pipeline::schedule_batch(plan, batch, 0, dflop::plan_method::dflop, zero_bubble);
  CHECK(ours.config == plan.chosen.config);

  for (const auto& baseline : plan.baselines) {
    INFO(baseline.method);
    const auto scheduled = named_pipeline::schedule_batch(plan, batch, 0, baseline.method, zero_bubble);
    CHECK(scheduled.config == baseline.config);
    // Arrival order, round-robin bins: slot k runs k-th.
    for (std::size_t j = 0; j < scheduled.slot_order.size(); ++j) CHECK(scheduled.slot_order[j] == j);
    if (baseline.method == dflop::plan_method::data_blind) {
      // Sequential packing: each bin is a contiguous run of the batch, in order.
      std::vector<std::uint32_t> concatenated;
      const int m = scheduled.config.microbatches, dp = scheduled.config.llm.dp;
      for (int bin = 0; bin < m * dp; ++bin) {
        const auto& list = scheduled.llm_microbatch(bin % dp, bin / dp);
        concatenated.insert(concatenated.end(), list.begin(), list.end());
      }
      CHECK(std::is_sorted(concatenated.begin(), concatenated.end()));
    }
  }
  auto without_baselines = plan;
  without_baselines.baselines.clear();
  CHECK_THROWS_WITH(
      named_pipeline::schedule_batch(without_baselines, batch, 0, dflop::plan_method::data_blind, zero_bubble),
      Catch::Contains("no method 'data_blind' (it has dflop)"));
}
