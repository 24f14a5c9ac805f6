// SPDX-License-Identifier: Apache-2.0
// Memory per stage of a scheduled batch: each stage is priced with the
// microbatch that needs the most there, at the schedule's in-flight peak, the
// same way the planner prices its tail microbatches.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/plan/stage_memories.hpp>
#include <dflop/schedule/activations.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

TEST_CASE("a scheduled batch's stage memory is its heaviest microbatch's, at the in-flight peak", "[plan][memory]") {
  const auto model = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 8);
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.baselines = false;
  options.microbatch_counts = {4};
  dflop::planner<dflop::flops_cost_model, dflop::analytic_memory_model> planner(
      model, cluster, dflop::flops_cost_model(model, cluster.gpu), dflop::analytic_memory_model(model), options);
  const dflop::plan plan = planner.make_plan(dflop::test::small_workload());
  const auto& batch = planner.sampled_batches().front();
  const auto scheduled = planner.schedule_batch(plan.chosen, batch, 3);
  const auto layout = planner.layout_of(plan.chosen);
  const dflop::analytic_memory_model memory(model);

  const auto heaviest = dflop::heaviest_stage_memories(memory, layout, scheduled, batch);
  REQUIRE(heaviest.size() == static_cast<std::size_t>(plan.chosen.config.stages()));
  const auto peaks = dflop::peak_activations(layout.schedule);
  // Every microbatch of a module, priced alone: none needs more than the heaviest, and one needs exactly that.
  std::vector<std::int64_t> most(heaviest.size(), 0);
  for (const bool encoder : {true, false})
    for (const auto& group : encoder ? scheduled.encoder_parts : scheduled.llm_microbatches) {
      std::vector<dflop::sample> members;
      for (std::uint32_t i : group) members.push_back(batch[i]);
      const auto priced = dflop::price_stage_memories(memory, layout.encoder, layout.llm, peaks,
                                                      encoder ? members : std::vector<dflop::sample>{},
                                                      encoder ? std::vector<dflop::sample>{} : members);
      for (std::size_t p = 0; p < priced.size(); ++p)
        if ((priced[p].module == dflop::module_kind::encoder) == encoder)
          most[p] = std::max(most[p], priced[p].bytes.total());
    }
  for (std::size_t p = 0; p < heaviest.size(); ++p) {
    INFO("stage position " << p);
    CHECK(heaviest[p].in_flight == static_cast<int>(peaks[p]));
    CHECK(heaviest[p].bytes.total() == most[p]);
    CHECK(heaviest[p].module == plan.memory[p].module);
    CHECK(heaviest[p].stage == plan.memory[p].stage);
    // Weights, gradients and optimizer states do not depend on the batch.
    CHECK(heaviest[p].bytes.parameters == plan.memory[p].bytes.parameters);
    CHECK(heaviest[p].bytes.optimizer_states == plan.memory[p].bytes.optimizer_states);
  }
}
