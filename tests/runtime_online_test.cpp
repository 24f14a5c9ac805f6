// SPDX-License-Identifier: Apache-2.0
// Online refinement on simulated, seeded, noisy measurements of known costs:
// recursive least squares against the batch fit, convergence from a model 3x
// off, tracking a change through forgetting, the cost-model plumbing into batch
// scheduling, and the drift monitor.
#include "error_of.hpp"
#include "plan_test_support.hpp"

#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/pipeline.hpp>
#include <dflop/runtime/drift_monitor.hpp>
#include <dflop/runtime/online_cost_model.hpp>
#include <dflop/runtime/recursive_least_squares.hpp>
#include <dflop/util/random.hpp>
#include <dflop/workload/sampling.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

using dflop::cost_pass;
using dflop::module_kind;
using dflop::module_part;

namespace {

const dflop::module_piece llm_layer{module_kind::llm, module_part::layer};

//! A true LLM layer cost: forward a + b N + c sum(s_i^2), backward twice that.
struct true_cost {
  double a = 2e-4, b = 1e-7, c = 3e-12;
  [[nodiscard]] double forward(const dflop::microbatch_shape& shape) const {
    return a + b * shape.tokens + c * shape.squared_tokens;
  }
};

//! A fitted model of the LLM layer at tp 1 with the given coefficients (backward = 2 x forward).
dflop::fitted_cost_model fitted_llm(const true_cost& cost) {
  const dflop::quadratic_fit forward{cost.a, cost.b, cost.c, 1, 0, 5};
  const dflop::quadratic_fit backward{2 * cost.a, 2 * cost.b, 2 * cost.c, 1, 0, 5};
  return dflop::fitted_cost_model({{llm_layer, 1, dflop::profile_size::tokens, forward, backward}});
}

//! A packed microbatch of 1..8 samples of 128..4096 tokens each.
std::vector<dflop::sample> random_microbatch(dflop::random_generator& random) {
  std::vector<dflop::sample> microbatch(static_cast<std::size_t>(random.between(1, 8)));
  for (auto& s : microbatch) s = {"s", dflop::modality::text, 0, 0, random.between(128, 4096)};
  return microbatch;
}

//! Feeds `count` noisy forward measurements of `truth` (multiplicative noise, sd `noise`); returns the errors.
std::vector<double> feed(dflop::online_cost_model& model, const true_cost& truth, int count,
                         dflop::random_generator& random, double noise = 0.05) {
  std::vector<double> errors;
  for (int i = 0; i < count; ++i) {
    const auto microbatch = random_microbatch(random);
    const double measured = truth.forward(dflop::shape_of(module_kind::llm, microbatch)) * (1 + noise * random.normal());
    const auto error = model.update(llm_layer, 1, microbatch, cost_pass::forward, measured);
    REQUIRE(error.has_value());
    errors.push_back(*error);
  }
  return errors;
}

double mean_of(const std::vector<double>& values, std::size_t first, std::size_t count) {
  return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(first),
                         values.begin() + static_cast<std::ptrdiff_t>(first + count), 0.0) /
         static_cast<double>(count);
}

}  // namespace

TEST_CASE("recursive least squares without forgetting matches the batch weighted fit", "[runtime][online]") {
  // A weak prior (large uncertainty) and forgetting 1: the estimate is the weighted least-squares solution.
  dflop::random_generator random(11);
  dflop::recursive_least_squares<3> rls({0, 0, 0}, 1e6, 1.0);
  std::vector<dflop::fit_point> points;
  for (int i = 0; i < 50; ++i) {
    const double x = random.uniform(0.1, 2.0);
    const double y = 1.5 - 0.7 * x + 0.4 * x * x + 0.01 * random.normal();
    const double weight = random.uniform(0.5, 2.0);
    rls.update({1, x, x * x}, y, weight);
    points.push_back({x, y, weight});
  }
  const auto batch = dflop::fit_quadratic(points);
  CHECK(rls.coefficients()[0] == Approx(batch.a).epsilon(1e-6));
  CHECK(rls.coefficients()[1] == Approx(batch.b).epsilon(1e-6));
  CHECK(rls.coefficients()[2] == Approx(batch.c).epsilon(1e-6));
  CHECK(rls.updates() == 50);
  CHECK(dflop::test::error_of<dflop::error>([] { dflop::recursive_least_squares<3>({0, 0, 0}, 1, 1.5); }) ==
        "recursive_least_squares: forgetting must be in (0, 1], got 1.500000");
}

TEST_CASE("the online model converges from a model 3x off on noisy measurements", "[runtime][online]") {
  STATIC_REQUIRE(dflop::cost_model<dflop::online_cost_model>);
  const true_cost truth;
  const true_cost seed{3 * truth.a, 3 * truth.b, 3 * truth.c};
  dflop::online_cost_model model(fitted_llm(seed));
  dflop::random_generator random(2024);
  const auto errors = feed(model, truth, 40, random);

  const double first = mean_of(errors, 0, 10), last = mean_of(errors, 30, 10);
  std::printf("online: mean relative prediction error, updates 1-10: %.1f%%, 31-40: %.1f%%\n", first * 100,
              last * 100);
  CHECK(errors.front() == Approx(2.0).margin(0.2));  // 3x off: |3y - y| / y, up to the noise
  CHECK(last < 0.10);
  CHECK(last < first);
  const auto summary = model.prediction_errors();
  CHECK(summary.updates == 40);
  CHECK(summary.window == 10);
  CHECK(summary.last == errors.back());
  CHECK(summary.rolling_mean == Approx(last).epsilon(1e-12));

  // As a cost model, on a microbatch it never saw: within 10% of the truth; the
  // snapshot prices the same; the untouched backward still says the seed.
  const std::vector<dflop::sample> unseen{{"a", dflop::modality::text, 0, 0, 3000}, {"b", dflop::modality::text, 0, 0, 700}};
  const auto shape = dflop::shape_of(module_kind::llm, unseen);
  const auto priced = model.estimate_time(module_kind::llm, 1, unseen);
  CHECK(priced.layer.forward == Approx(truth.forward(shape)).epsilon(0.10));
  CHECK(priced.layer.backward == Approx(2 * seed.a + 2 * seed.b * shape.tokens + 2 * seed.c * shape.squared_tokens));
  CHECK(priced.head == dflop::pass_time{});
  const auto frozen = model.snapshot().estimate_time(module_kind::llm, 1, unseen);
  CHECK(frozen.layer.forward == Approx(priced.layer.forward).epsilon(1e-12));
  CHECK(frozen.layer.backward == Approx(priced.layer.backward).epsilon(1e-12));
}

TEST_CASE("forgetting lets the online model track a change of the true costs", "[runtime][online]") {
  const true_cost before;
  const true_cost after{before.a / 2, 2.5 * before.b, 2 * before.c};  // e.g. a slower kernel for long sequences
  const auto run = [&](double forgetting) {
    dflop::online_cost_model model(fitted_llm(before), {.forgetting = forgetting});
    dflop::random_generator random(7);
    (void)feed(model, before, 40, random);
    const auto errors = feed(model, after, 40, random);
    return mean_of(errors, 30, 10);
  };
  const double forgetting = run(0.9), no_forgetting = run(1.0);
  std::printf("online: after a change, last-10 error with forgetting 0.9: %.1f%%, without: %.1f%%\n",
              forgetting * 100, no_forgetting * 100);
  CHECK(forgetting < 0.10);
  CHECK(no_forgetting > 1.5 * forgetting);
}

TEST_CASE("the online model rejects observations it cannot use, saying which", "[runtime][online]") {
  using dflop::test::error_of;
  dflop::online_cost_model model(fitted_llm({}));
  const std::vector<dflop::sample> one{{"a", dflop::modality::text, 0, 0, 1000}};
  CHECK(error_of<dflop::error>([&] { (void)model.update(llm_layer, 4, one, cost_pass::forward, 1e-3); }) ==
        "online_cost_model: no profile for 'llm' at tp 4 (profiled tp: 1)");
  CHECK(error_of<dflop::error>([&] {
          (void)model.update({module_kind::llm, module_part::head}, 1, one, cost_pass::backward, 1e-3);
        }) == "online_cost_model::update ('lm_head' at tp 1, backward): the seed model does not price this part, "
              "so there is nothing to refine");
  CHECK(error_of<dflop::error>([&] { (void)model.update(llm_layer, 1, one, cost_pass::forward, -1); }) ==
        "online_cost_model::update ('llm' at tp 1, forward): measured seconds must be finite and >= 0, got -1.000000");
  CHECK_FALSE(model.update(llm_layer, 1, {}, cost_pass::forward, 0).has_value());  // empty: nothing to learn
  CHECK(model.prediction_errors().updates == 0);
}

TEST_CASE("batch scheduling with the online model follows its refinement", "[runtime][online]") {
  const auto spec = dflop::test::small_model();
  const auto cluster = dflop::test::small_cluster(8, 4);
  const auto workload = dflop::test::small_workload(200);
  dflop::online_cost_model online =
      dflop::online_cost_model::from_cost_model(dflop::flops_cost_model(spec, cluster.gpu), spec, {.tp_degrees = {1, 2, 4, 8}});
  // Seeded from the FLOPs model: it prices like it where it was sampled.
  const std::vector<dflop::sample> probe{{"p", dflop::modality::text, 0, 0, 2048}};
  const auto reference = dflop::flops_cost_model(spec, cluster.gpu).estimate_time(module_kind::llm, 1, probe);
  CHECK(online.estimate_time(module_kind::llm, 1, probe).layer.forward == Approx(reference.layer.forward).epsilon(0.01));

  using online_pipeline = dflop::pipeline<dflop::online_cost_model>;
  dflop::planner_options options;
  options.global_batch = 32;
  options.batches = 2;
  options.baselines = false;
  options.batch.order_budget = 8;
  const auto plan = online_pipeline::make_plan(workload, spec, cluster, online, dflop::analytic_memory_model(spec), options);
  const int tp = plan.chosen.config.llm.tp;
  const auto batch = dflop::sample_batch(workload, 32, dflop::batch_mode::without_replacement, 5);
  const dflop::analytic_memory_model memory(spec);
  const double predicted = online_pipeline::schedule_batch(plan, batch, online, memory, 1).predicted_seconds;

  // The LLM layers measure 3x slower than predicted: the refined model predicts a slower iteration.
  dflop::random_generator random(3);
  for (int i = 0; i < 20; ++i) {
    const auto microbatch = random_microbatch(random);
    for (cost_pass pass : {cost_pass::forward, cost_pass::backward}) {
      const auto now = online.estimate_time(module_kind::llm, tp, microbatch).layer;
      (void)online.update(llm_layer, tp, microbatch, pass, 3 * (pass == cost_pass::forward ? now.forward : now.backward));
    }
  }
  const double refined = online_pipeline::schedule_batch(plan, batch, online, memory, 1).predicted_seconds;
  CHECK(refined > 1.5 * predicted);
}

TEST_CASE("the drift monitor fires on a sustained drift and stays silent otherwise", "[runtime][online]") {
  dflop::drift_monitor monitor(2.0, {.threshold = 0.10, .window = 5, .min_samples = 3});
  for (double measured : {2.1, 1.9, 2.05, 1.95, 2.15, 1.85}) CHECK_FALSE(monitor.observe(measured).has_value());
  CHECK(monitor.observe(5.0) == std::nullopt);  // one slow iteration (a checkpoint) moves no median
  CHECK(monitor.observe(2.0) == std::nullopt);
  CHECK(monitor.observe(2.6) == std::nullopt);  // window 2.15 1.85 5.0 2.0 2.6: median 2.15, +7.5%
  const auto fired = monitor.observe(2.6);      // window 1.85 5.0 2.0 2.6 2.6: median 2.6, +30%
  REQUIRE(fired.has_value());
  CHECK(*fired == "re-plan: measured 2.6 s vs predicted 2 s (+30.0%)");
  CHECK(monitor.status().drifted);
  CHECK(monitor.status().relative_drift == Approx(0.3));

  monitor.reset(2.6);  // re-planned: a new prediction, a fresh window
  CHECK_FALSE(monitor.status().drifted);
  CHECK(monitor.status().samples == 0);
  CHECK(monitor.observe(1.8) == std::nullopt);  // fewer than min_samples: no verdict yet
  CHECK(monitor.observe(1.8) == std::nullopt);
  CHECK(monitor.observe(1.9) == "re-plan: measured 1.8 s vs predicted 2.6 s (-30.8%)");  // faster counts too

  using dflop::test::error_of;
  CHECK(error_of([] { dflop::drift_monitor bad(0.0); }) ==
        "drift_monitor: predicted iteration time must be finite and > 0, got 0.000000");
  CHECK(error_of([] { dflop::drift_monitor bad(1.0, {.threshold = 0.1, .window = 2, .min_samples = 3}); }) ==
        "drift_options::min_samples: must be in [1, window = 2], got 3");
  CHECK(error_of([&] { (void)monitor.observe(-1); }) ==
        "drift_monitor::observe: measured iteration time must be finite and >= 0, got -1.000000");
}
