// SPDX-License-Identifier: Apache-2.0
// calibrated_cost_model: prices are the base model's until a round ends; a
// constant ratio is learned in the closed form r^(1 - (1 - w)^k); random rounds
// agree with an independent reference (sorted median, power form); one
// preempted op does not move the median; modules and passes learn apart; a
// slowly drifting machine is predicted better than by the base model; bad
// options and observations are refused with the parameter named.
#include "error_of.hpp"

#include <dflop/cost/cost_model.hpp>
#include <dflop/runtime/calibrated_cost_model.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

using dflop::cost_pass;
using dflop::module_kind;

namespace {

//! A base model with distinct prices per module, part and pass that grow with the tokens.
struct token_cost {
  [[nodiscard]] dflop::module_cost estimate_time(module_kind kind, int tp, std::span<const dflop::sample> mb) const {
    double tokens = 0;
    for (const auto& s : mb) tokens += static_cast<double>(kind == module_kind::encoder ? s.encoder_tokens : s.llm_tokens);
    const double unit = tokens * 1e-6 / tp * (kind == module_kind::encoder ? 3 : 1);
    return {{unit, 2 * unit}, {0.1 * unit, 0.3 * unit}, {0.2 * unit, 0.5 * unit}};
  }
};
static_assert(dflop::cost_model<token_cost>);
static_assert(dflop::cost_model<dflop::calibrated_cost_model<token_cost>>);

const std::array<module_kind, 2> kinds{module_kind::encoder, module_kind::llm};
const std::array<cost_pass, 2> passes{cost_pass::forward, cost_pass::backward};

std::vector<dflop::sample> microbatch(std::int64_t tokens) {
  return {{"a", dflop::modality::image, 1, tokens, tokens}, {"b", dflop::modality::text, 0, 0, tokens / 2 + 1}};
}

//! The median as a sorted list's middle (mean of the two middles for an even count).
double reference_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

TEST_CASE("calibrated_cost_model prices as its base until a round ends, then every part of a pass by its factor") {
  dflop::calibrated_cost_model<token_cost> model(token_cost{}, {.weight = 1});
  const auto mb = microbatch(700);
  for (auto kind : kinds) {
    CHECK(model.estimate_time(kind, 2, mb) == token_cost{}.estimate_time(kind, 2, mb));
    for (auto pass : passes) CHECK(model.factor(kind, pass) == 1);
  }
  // Observed but not yet folded in: still the base's prices.
  model.observe(module_kind::llm, cost_pass::forward, 1.0, 1.5);
  model.observe(module_kind::llm, cost_pass::backward, 2.0, 1.0);
  CHECK(model.estimate_time(module_kind::llm, 1, mb) == token_cost{}.estimate_time(module_kind::llm, 1, mb));
  CHECK(model.end_round() == 2);
  CHECK(model.rounds() == 1);
  const dflop::module_cost base = token_cost{}.estimate_time(module_kind::llm, 1, mb);
  const dflop::module_cost scaled = model.estimate_time(module_kind::llm, 1, mb);
  for (auto [b, s] : {std::pair{base.layer, scaled.layer}, {base.embedding, scaled.embedding}, {base.head, scaled.head}}) {
    CHECK(s.forward == Approx(1.5 * b.forward).epsilon(1e-14));
    CHECK(s.backward == Approx(0.5 * b.backward).epsilon(1e-14));
  }
  // The encoder saw nothing: unchanged.
  CHECK(model.estimate_time(module_kind::encoder, 1, mb) == token_cost{}.estimate_time(module_kind::encoder, 1, mb));
}

TEST_CASE("calibrated_cost_model learns a constant ratio as r^(1 - (1 - w)^k)") {
  dflop::random_generator random(11);
  for (int trial = 0; trial < 200; ++trial) {
    const double weight = trial % 10 == 0 ? 1.0 : random.uniform(0.05, 1.0);
    dflop::calibrated_cost_model<token_cost> model(token_cost{}, {.weight = weight});
    std::array<double, 4> ratio{};
    for (auto& r : ratio) r = random.lognormal(0, 0.5);
    const int rounds = static_cast<int>(random.between(1, 12));
    for (int k = 0; k < rounds; ++k) {
      std::size_t i = 0;
      for (auto kind : kinds)
        for (auto pass : passes) {
          const auto ops = random.between(1, 6);
          for (int op = 0; op < ops; ++op) {
            const double base = random.uniform(1e-4, 1.0);
            model.observe(kind, pass, base, base * ratio[i]);
          }
          ++i;
        }
      REQUIRE(model.end_round() == 4);
    }
    std::size_t i = 0;
    for (auto kind : kinds)
      for (auto pass : passes) {
        const double expected = std::pow(ratio[i++], 1 - std::pow(1 - weight, rounds));
        CHECK(model.factor(kind, pass) == Approx(expected).epsilon(1e-12));
      }
  }
}

TEST_CASE("calibrated_cost_model agrees with an independent reference on random rounds, min_ops included") {
  dflop::random_generator random(5);
  for (int trial = 0; trial < 100; ++trial) {
    const double weight = random.uniform(0.1, 1.0);
    const auto min_ops = static_cast<std::size_t>(random.between(1, 4));
    dflop::calibrated_cost_model<token_cost> model(token_cost{}, {.weight = weight, .min_ops = min_ops});
    std::array<double, 4> expected{1, 1, 1, 1};
    for (int k = 0; k < 8; ++k) {
      std::array<std::vector<double>, 4> ratios;
      std::size_t i = 0;
      for (auto kind : kinds)
        for (auto pass : passes) {
          const auto ops = random.between(0, 6);
          for (int op = 0; op < ops; ++op) {
            const double base = random.uniform(1e-3, 2.0), measured = base * random.lognormal(0.1, 0.4);
            model.observe(kind, pass, base, measured);
            ratios[i].push_back(measured / base);
          }
          ++i;
        }
      std::size_t moved = 0;
      for (std::size_t j = 0; j < 4; ++j)
        if (ratios[j].size() >= min_ops) {
          expected[j] = std::pow(expected[j], 1 - weight) * std::pow(reference_median(ratios[j]), weight);
          ++moved;
        }
      REQUIRE(model.end_round() == moved);
      i = 0;
      for (auto kind : kinds)
        for (auto pass : passes) CHECK(model.factor(kind, pass) == Approx(expected[i++]).epsilon(1e-12));
    }
  }
}

TEST_CASE("calibrated_cost_model: one preempted op does not move a round's median") {
  dflop::calibrated_cost_model<token_cost> model(token_cost{}, {.weight = 1});
  for (int op = 0; op < 9; ++op) model.observe(module_kind::encoder, cost_pass::forward, 0.01 * (op + 1), 0.012 * (op + 1));
  model.observe(module_kind::encoder, cost_pass::forward, 0.05, 0.5);  // ten times its price
  model.end_round();
  CHECK(model.factor(module_kind::encoder, cost_pass::forward) == Approx(1.2).epsilon(1e-12));
}

TEST_CASE("calibrated_cost_model: a round below min_ops leaves the factor and is not carried over") {
  dflop::calibrated_cost_model<token_cost> model(token_cost{}, {.weight = 1, .min_ops = 3});
  model.observe(module_kind::llm, cost_pass::backward, 1, 4);
  model.observe(module_kind::llm, cost_pass::backward, 1, 4);
  CHECK(model.end_round() == 0);
  CHECK(model.factor(module_kind::llm, cost_pass::backward) == 1);
  for (int op = 0; op < 3; ++op) model.observe(module_kind::llm, cost_pass::backward, 1, 2);
  CHECK(model.end_round() == 1);
  CHECK(model.factor(module_kind::llm, cost_pass::backward) == Approx(2).epsilon(1e-14));  // the 4s are gone
}

TEST_CASE("calibrated_cost_model predicts a drifting machine better than its base model") {
  // Ops priced by the base model; the machine's speed wanders by up to 40% over
  // 30 rounds, each op with 5% noise. Predictions of a round are made before it.
  dflop::random_generator random(21);
  dflop::calibrated_cost_model<token_cost> model(token_cost{});
  std::vector<double> base_errors, calibrated_errors;
  double level = 1.0;
  for (int k = 0; k < 30; ++k) {
    level = std::clamp(level * random.lognormal(0, 0.08), 0.7, 1.4);
    for (int op = 0; op < 12; ++op) {
      const auto mb = microbatch(random.between(50, 3000));
      const auto kind = kinds[static_cast<std::size_t>(op % 2)];
      const double base = token_cost{}.estimate_time(kind, 1, mb).layer.forward;
      const double priced = model.estimate_time(kind, 1, mb).layer.forward;
      const double measured = base * level * random.lognormal(0, 0.05);
      base_errors.push_back(std::abs(base - measured) / measured);
      calibrated_errors.push_back(std::abs(priced - measured) / measured);
      model.observe(kind, cost_pass::forward, base, measured);
    }
    model.end_round();
  }
  INFO("base " << reference_median(base_errors) << ", calibrated " << reference_median(calibrated_errors));
  CHECK(reference_median(calibrated_errors) < 0.5 * reference_median(base_errors));
}

TEST_CASE("calibrated_cost_model refuses bad options and observations, naming them") {
  using dflop::test::error_of;
  const auto make = [](dflop::calibration_options options) {
    return [options] { dflop::calibrated_cost_model<token_cost> model(token_cost{}, options); };
  };
  CHECK(error_of(make({.weight = 0})) == "calibration_options::weight: must be in (0, 1], got 0.000000");
  CHECK(error_of(make({.weight = 1.5})) == "calibration_options::weight: must be in (0, 1], got 1.500000");
  CHECK(error_of(make({.weight = std::numeric_limits<double>::quiet_NaN()})).find("calibration_options::weight") == 0);
  CHECK(error_of(make({.weight = 0.5, .min_ops = 0})) == "calibration_options::min_ops: must be >= 1, got 0");
  dflop::calibrated_cost_model<token_cost> model(token_cost{});
  CHECK(error_of([&] { model.observe(module_kind::encoder, cost_pass::backward, 0, 1); }) ==
        "calibrated_cost_model::observe: the base price of one encoder backward op must be finite and > 0, got 0.000000");
  CHECK(error_of([&] { model.observe(module_kind::llm, cost_pass::forward, 1, -2); }) ==
        "calibrated_cost_model::observe: the measured time of one llm forward op must be finite and > 0, got -2.000000");
  CHECK(error_of([&] { model.observe(module_kind::llm, cost_pass::forward, 1, std::numeric_limits<double>::infinity()); })
            .find("measured time of one llm forward op") != std::string::npos);
  // Nothing refused was recorded.
  CHECK(model.end_round() == 0);
}
