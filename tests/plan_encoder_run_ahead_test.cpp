// SPDX-License-Identifier: Apache-2.0
// The planner's encoder run-ahead (planner_options::encoder_run_ahead): tried
// on the winner after the final scoring, kept only where it is faster and fits.
// With it the plan is never slower than without, and a kept run-ahead shows in
// the plan's schedule, its stage memories and what schedule_batch predicts.
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/workload/mixture.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

using namespace dflop;
using search_planner = planner<flops_cost_model, analytic_memory_model>;

namespace {

search_planner make_planner(const multimodal_spec& model, const cluster_spec& cluster, planner_options options,
                            bool run_ahead) {
  options.encoder_run_ahead = run_ahead;
  return search_planner(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model), options,
                        {}, {}, named_schedule(std::string(named_schedule::automatic)));
}

}  // namespace

TEST_CASE("encoder run-ahead: never slower; where kept, the plan's schedule and memory hold it", "[plan]") {
  // The 32B with its 6B encoder on 16 GPUs: an encoder pipeline of several stages
  // whose LLM replicas wait for their parts (and small runs of the others).
  struct setting {
    const char* model;
    int gpus;
    int global_batch;
    const char* mixture;
  };
  int kept = 0;
  for (const auto& s : {setting{"internvit-6b+qwen2.5-32b", 16, 128, "onevision"},
                        setting{"siglip-400m+qwen2.5-7b", 16, 128, "video-heavy"},
                        setting{"siglip-400m+qwen2.5-7b", 16, 128, "text-heavy"}}) {
    INFO(s.model << " on " << s.gpus << " GPUs, " << s.mixture);
    const auto model = find_model(s.model);
    const cluster_spec cluster{s.gpus, 8, find_gpu("h100-80gb")};
    planner_options options;
    options.global_batch = s.global_batch;
    options.batches = 2;
    options.threads = 1;
    const auto workload = generate_mixture(s.mixture, 3000, 1);
    auto plain_planner = make_planner(model, cluster, options, false);
    auto ahead_planner = make_planner(model, cluster, options, true);
    const plan plain = plain_planner.make_plan(workload);
    const plan ahead = ahead_planner.make_plan(workload);
    CHECK(plain.chosen.config.encoder_run_ahead == 0);
    CHECK(ahead.chosen.iteration_seconds <= plain.chosen.iteration_seconds);
    const int run_ahead = ahead.chosen.config.encoder_run_ahead;
    if (run_ahead == 0) {
      CHECK(ahead.chosen.iteration_seconds == plain.chosen.iteration_seconds);
      continue;
    }
    ++kept;
    CHECK(ahead.chosen.iteration_seconds < plain.chosen.iteration_seconds);
    // The stage memories count the deeper in-flight peaks, within the budget.
    const auto layout = make_plan_layout(ahead, plan_method::dflop, named_schedule(ahead.schedule));
    const auto peaks = peak_activations(layout.schedule);
    const auto plain_peaks = peak_activations(make_schedule(
        ahead.schedule, {static_cast<std::uint32_t>(ahead.chosen.config.stages()),
                         static_cast<std::uint32_t>(ahead.chosen.config.microbatches)}));
    REQUIRE(ahead.memory.size() == peaks.size());
    for (std::size_t p = 0; p < peaks.size(); ++p) {
      INFO("position " << p);
      const bool encoder = static_cast<int>(p) < ahead.chosen.config.encoder.pp;
      CHECK(peaks[p] == (encoder ? std::min<std::uint32_t>(ahead.chosen.config.microbatches,
                                                            plain_peaks[p] + static_cast<std::uint32_t>(run_ahead))
                                 : plain_peaks[p]));
      CHECK(ahead.memory[p].in_flight == static_cast<int>(peaks[p]));
      CHECK(ahead.memory[p].bytes.total() <= ahead.batch.memory_budget_bytes);
    }
    // schedule_batch schedules under the same op lists: its prediction is the plan's figure's kind.
    const auto scheduled = ahead_planner.schedule_batch(ahead.chosen, ahead_planner.sampled_batches().front(), 0);
    CHECK(scheduled.config.encoder_run_ahead == run_ahead);
    CHECK(scheduled.predicted_seconds > 0);
  }
  CHECK(kept >= 1);  // the 32B's encoder pipeline gains from it
}
