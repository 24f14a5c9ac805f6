// SPDX-License-Identifier: Apache-2.0
// The planner's schedule search (`named_schedule("auto")`): it plans under each
// of planner_options::schedule_candidates and keeps the fastest plan, whose op
// lists, memory peaks, figures and saved form all follow the chosen schedule.
#include "error_of.hpp"
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/planner.hpp>
#include <dflop/schedule/activations.hpp>
#include <dflop/schedule/by_name.hpp>
#include <dflop/schedule/validate.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

using dflop::analytic_memory_model;
using dflop::flops_cost_model;
using dflop::named_schedule;
using search_planner = dflop::planner<flops_cost_model, analytic_memory_model>;

namespace {

search_planner make_planner(const dflop::cluster_spec& cluster, const dflop::planner_options& options,
                            named_schedule schedule) {
  const auto model = dflop::test::small_model();
  return search_planner(model, cluster, flops_cost_model(model, cluster.gpu), analytic_memory_model(model), options,
                        {}, {}, std::move(schedule));
}

dflop::planner_options options_for(std::uint64_t seed) {
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.seed = seed;
  options.batch.order_budget = 8;
  options.cap_check_batches = 8;
  // The schedules' own op lists: the encoder run-ahead tried on the winner
  // afterwards has its own test (plan_encoder_run_ahead_test.cpp).
  options.encoder_run_ahead = false;
  return options;
}

}  // namespace

TEST_CASE("schedule 'auto' keeps the fastest schedule's plan, never slower than the scan's schedule alone",
          "[plan][schedule][heavy]") {
  // Candidate lists with equal in-flight peaks (ZB-H1, 1F1B) and with GPipe's
  // larger ones; clusters from 4 to 16 GPUs; two memory sizes (the smaller
  // forces savers and makes peaks matter); two seeds.
  const std::vector<std::vector<std::string>> lists{{"zb-h1", "1f1b"}, {"1f1b", "gpipe"}, {"gpipe", "zb-h1", "1f1b"}};
  std::size_t later_wins = 0;  // plans whose schedule is not the scan's
  for (const auto& names : lists)
    for (int gpus : {4, 8, 16})
      for (std::int64_t memory_gib : {80, 24})
        for (std::uint64_t seed : {1, 2}) {
          INFO("candidates " << names.front() << "..., gpus " << gpus << ", memory " << memory_gib << " GiB, seed "
                             << seed);
          const auto cluster = dflop::test::small_cluster(gpus, 8, memory_gib);
          const auto workload = dflop::test::small_workload(400, seed);
          auto options = options_for(seed);
          options.schedule_candidates = names;

          auto forced = make_planner(cluster, options, named_schedule(names.front()));
          const dflop::plan first = forced.make_plan(workload);
          CHECK(first.schedule == names.front());
          CHECK(first.search.schedules.empty());

          auto searching = make_planner(cluster, options, named_schedule("auto"));
          const dflop::plan chosen = searching.make_plan(workload);
          const auto& trials = chosen.search.schedules;
          REQUIRE(trials.size() == names.size());
          for (std::size_t s = 0; s < names.size(); ++s) CHECK(trials[s].schedule == names[s]);
          // The scan runs under the first schedule, as the forced search does, to the bit.
          CHECK(trials[0].seconds == first.chosen.iteration_seconds);
          CHECK(chosen.chosen.iteration_seconds <= first.chosen.iteration_seconds);
          // The winner is the fastest trial (ties: the earlier), and its figure is the plan's.
          const auto fastest = std::min_element(trials.begin(), trials.end(), [](const auto& a, const auto& b) {
            const double inf = std::numeric_limits<double>::infinity();
            return (a.seconds > 0 ? a.seconds : inf) < (b.seconds > 0 ? b.seconds : inf);
          });
          CHECK(chosen.schedule == fastest->schedule);
          CHECK(chosen.chosen.iteration_seconds == fastest->seconds);
          if (chosen.schedule == names.front()) CHECK(chosen.chosen.config == first.chosen.config);

          // The plan is what its schedule does: rescoring the chosen configuration
          // under it gives the plan's figure, the op lists are the schedule's, valid,
          // and each stage's memory holds that schedule's in-flight peak within the GPU.
          REQUIRE(searching.score(chosen.chosen.config).has_value());
          CHECK(*searching.score(chosen.chosen.config) == Approx(chosen.chosen.iteration_seconds).epsilon(1e-12));
          const dflop::plan_layout layout = searching.layout_of(chosen.chosen);
          CHECK(layout.schedule.name == chosen.schedule);
          CHECK(layout.schedule == dflop::make_schedule(chosen.schedule, {layout.schedule.ranks, layout.schedule.microbatches}));
          CHECK_NOTHROW(dflop::validate(layout.schedule));
          const auto peaks = dflop::peak_activations(layout.schedule);
          const int encoder_stages = chosen.chosen.config.encoder.pp;
          const double usable = static_cast<double>(cluster.gpu.memory_bytes) * (1 - options.memory_headroom);
          REQUIRE(chosen.memory.size() == peaks.size());
          for (const auto& stage : chosen.memory) {
            const std::size_t position =
                static_cast<std::size_t>(stage.module == dflop::module_kind::encoder ? stage.stage : encoder_stages + stage.stage);
            CHECK(stage.in_flight == static_cast<int>(peaks[position]));
            CHECK(static_cast<double>(stage.bytes.total()) <= usable);
          }
          // Methods are compared on one schedule: the baselines are those a search
          // forced to the chosen schedule picks and scores.
          if (chosen.schedule != names.front()) {
            ++later_wins;
            auto under_winner = make_planner(cluster, options, named_schedule(chosen.schedule));
            CHECK(under_winner.make_plan(workload).baselines == chosen.baselines);
          } else {
            CHECK(first.baselines == chosen.baselines);
          }
          // A batch scheduled for the plan runs the chosen schedule's op lists.
          const auto batch = dflop::test::small_workload(32, seed + 100);
          const dflop::batch_schedule scheduled = searching.schedule_batch(chosen.chosen, batch, 3);
          CHECK(scheduled.predicted_seconds > 0);
        }
  CHECK(later_wins > 0);  // the final scoring does choose other schedules than the scan's
}

TEST_CASE("a given schedule is not searched; 'auto' with one candidate is that schedule", "[plan][schedule]") {
  const auto cluster = dflop::test::small_cluster(8, 8);
  const auto workload = dflop::test::small_workload(400, 4);
  auto options = options_for(4);
  options.baselines = false;

  auto forced = make_planner(cluster, options, named_schedule("zb-h1"));
  const dflop::plan zb = forced.make_plan(workload);
  CHECK(zb.schedule == "zb-h1");
  CHECK(zb.search.schedules.empty());

  options.schedule_candidates = {"zb-h1"};  // a list of one: that schedule, as forced
  auto single = make_planner(cluster, options, named_schedule("auto"));
  const dflop::plan searched = single.make_plan(workload);
  CHECK(searched.schedule == "zb-h1");
  REQUIRE(searched.search.schedules.size() == 1);
  CHECK(searched.chosen.config == zb.chosen.config);
  CHECK(searched.chosen.iteration_seconds == zb.chosen.iteration_seconds);
}

TEST_CASE("the searched schedules survive the plan file", "[plan][schedule]") {
  const auto cluster = dflop::test::small_cluster(8, 8);
  auto searching = make_planner(cluster, options_for(6), named_schedule("auto"));
  const dflop::plan chosen = searching.make_plan(dflop::test::small_workload(400, 6));
  const auto text = dflop::to_json(chosen).dump();
  const dflop::plan read = dflop::parse_plan_json(text);
  CHECK(read.search == chosen.search);
  CHECK(read.schedule == chosen.schedule);

  auto broken = dflop::to_json(chosen);
  broken["search"]["schedules"][0]["iteration_seconds"] = -1;
  const auto message = dflop::test::error_of<dflop::input_error>([&] { (void)dflop::parse_plan_json(broken.dump()); });
  CHECK_THAT(message, Catch::Contains("search.schedules[0].iteration_seconds"));
}

TEST_CASE("bad schedule candidates and 'auto' outside the planner are named errors", "[plan][schedule]") {
  const auto cluster = dflop::test::small_cluster(8, 8);
  const auto rejected = [&](std::vector<std::string> names) {
    auto options = options_for(1);
    options.schedule_candidates = std::move(names);
    return dflop::test::error_of<dflop::input_error>([&] { (void)make_planner(cluster, options, named_schedule("auto")); });
  };
  CHECK_THAT(rejected({}), Catch::Contains("planner_options::schedule_candidates") && Catch::Contains("empty"));
  CHECK_THAT(rejected({"1f1b", "interleaved"}), Catch::Contains("entry 1 'interleaved'") &&
                                                    Catch::Contains("not a one-chunk schedule"));
  CHECK_THAT(rejected({"auto"}), Catch::Contains("entry 0 'auto'"));
  CHECK_THAT(rejected({"1f1b", "bogus"}), Catch::Contains("entry 1 'bogus'"));
  CHECK_THAT(rejected({"zb-h1", "1f1b", "zb-h1"}), Catch::Contains("lists 'zb-h1' twice"));

  // A fixed schedule ignores the candidates: only "auto" reads them.
  auto options = options_for(1);
  options.schedule_candidates = {};
  CHECK_NOTHROW(make_planner(cluster, options, named_schedule("1f1b")));

  const auto unresolved = dflop::test::error_of<dflop::schedule_error>(
      [] { (void)named_schedule("auto").make(dflop::schedule_shape{2, 4}); });
  CHECK_THAT(unresolved, Catch::Contains("chosen by the planner"));

  CHECK(dflop::plannable_schedule("auto", "--schedule").is_automatic());
  CHECK(dflop::plannable_schedule("zb-h1", "--schedule").name() == "zb-h1");
  const auto flag = dflop::test::error_of<dflop::input_error>([] { (void)dflop::plannable_schedule("interleaved", "--schedule"); });
  CHECK_THAT(flag, Catch::Contains("--schedule") && Catch::Contains("neither 'auto' nor a one-chunk schedule"));
}
