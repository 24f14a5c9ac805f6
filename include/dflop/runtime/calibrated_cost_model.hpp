// SPDX-License-Identifier: Apache-2.0
//! \file
//! A cost model corrected for the machine's speed now: any cost model's prices
//! times one factor per module and pass, learned from the ratio of measured to
//! predicted op times of the rounds (steps) run so far.
//!
//! Why: a profile is taken before the job, and the hardware's speed moves
//! after it (clocks, thermal limits, a shared host's other tenants: on the
//! project's CPU VM 15-40% within minutes). That moves every op of a module by
//! about one factor, which the fitted curves' shape cannot know and which
//! `online_cost_model` (per-part curves refit from per-part observations) is
//! not fed by a trainer that times whole stages. Learning that one factor from
//! the previous steps' ops keeps the profile's shape and tracks the level.
//!
//!     dflop::calibrated_cost_model calibrated(fitted, {.weight = 0.5});
//!     // each step: price ops with calibrated.estimate_time(...), run them, then
//!     calibrated.observe(dflop::module_kind::encoder, dflop::cost_pass::forward,
//!                        fitted_price_seconds, measured_seconds);   // per op
//!     calibrated.end_round();   // fold this step's ratios into the factors
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/runtime/online_cost_model.hpp>
#include <dflop/runtime/timing_summary.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dflop {

//! Knobs of `calibrated_cost_model`.
struct calibration_options {
  //! Weight of the newest round's ratio, in (0, 1]: each round the log of a
  //! factor moves this fraction of the way to the log of the round's median
  //! ratio (1: the factor is the last round's median; smaller: steadier, slower).
  double weight = 0.5;
  //! Ops of one module and pass a round needs before its median counts, >= 1
  //! (a round with fewer leaves that factor as it was).
  std::size_t min_ops = 1;
};

//! `Model`'s prices times `factor(kind, pass)`. The factors start at 1 and move
//! only in `end_round`, so within a round every price is fixed and a round's
//! predictions are made before any of its ops is learned from. The median ratio
//! of a round ignores the odd preempted op; averaging logs treats "twice as
//! slow" and "twice as fast" alike. Not synchronized: one thread observes and
//! prices (or hand others a copy: it is a value type).
template <cost_model Model>
class calibrated_cost_model {
public:
  //! \throws input_error naming the option when out of range.
  explicit calibrated_cost_model(Model base, calibration_options options = {})
      : base_(std::move(base)), options_(options) {
    if (!(options_.weight > 0 && options_.weight <= 1))
      throw input_error("calibration_options::weight", 0, "must be in (0, 1], got " + std::to_string(options_.weight));
    if (options_.min_ops < 1) throw input_error("calibration_options::min_ops", 0, "must be >= 1, got 0");
  }

  //! See `cost_model`: the base model's price, each pass times its module's factor.
  [[nodiscard]] module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const {
    module_cost cost = base_.estimate_time(kind, tp, microbatch);
    const double forward = factor(kind, cost_pass::forward), backward = factor(kind, cost_pass::backward);
    for (pass_time* part : {&cost.layer, &cost.embedding, &cost.head}) {
      part->forward *= forward;
      part->backward *= backward;
    }
    return cost;
  }

  //! Records one op of this round: the *base* model's price of it and its
  //! measured time (same units). Learned from at the next `end_round`.
  //! \throws input_error when either time is not finite and > 0.
  void observe(module_kind kind, cost_pass pass, double base_seconds, double measured_seconds) {
    if (!std::isfinite(base_seconds) || !(base_seconds > 0))
      throw input_error("calibrated_cost_model::observe", 0,
                        std::string("the base price of one ") + std::string(to_string(kind)) + " " +
                            std::string(to_string(pass)) + " op must be finite and > 0, got " +
                            std::to_string(base_seconds));
    if (!std::isfinite(measured_seconds) || !(measured_seconds > 0))
      throw input_error("calibrated_cost_model::observe", 0,
                        std::string("the measured time of one ") + std::string(to_string(kind)) + " " +
                            std::string(to_string(pass)) + " op must be finite and > 0, got " +
                            std::to_string(measured_seconds));
    pending_[index(kind, pass)].push_back(measured_seconds / base_seconds);
  }

  //! Ends a round: each factor with at least `min_ops` observations this round
  //! becomes exp((1 - w) log factor + w log median ratio); the round's
  //! observations are dropped. Returns how many factors moved.
  std::size_t end_round() {
    std::size_t moved = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].size() >= options_.min_ops) {
        const double ratio = summarize(pending_[i]).median;
        factors_[i] = std::exp((1 - options_.weight) * std::log(factors_[i]) + options_.weight * std::log(ratio));
        ++moved;
      }
      pending_[i].clear();
    }
    ++rounds_;
    return moved;
  }

  //! The factor `kind`'s `pass` times are scaled by now (1 until learned).
  [[nodiscard]] double factor(module_kind kind, cost_pass pass) const noexcept { return factors_[index(kind, pass)]; }
  //! Rounds ended so far.
  [[nodiscard]] std::size_t rounds() const noexcept { return rounds_; }
  //! The model being corrected.
  [[nodiscard]] const Model& base() const noexcept { return base_; }
  //! The options in use.
  [[nodiscard]] const calibration_options& options() const noexcept { return options_; }

private:
  [[nodiscard]] static std::size_t index(module_kind kind, cost_pass pass) noexcept {
    return 2 * (kind == module_kind::encoder ? 0u : 1u) + (pass == cost_pass::forward ? 0u : 1u);
  }

  Model base_;
  calibration_options options_;
  std::array<double, 4> factors_{1, 1, 1, 1};            //!< [encoder F, encoder B, LLM F, LLM B]
  std::array<std::vector<double>, 4> pending_;           //!< this round's measured / base ratios, same order
  std::size_t rounds_ = 0;
};

}  // namespace dflop
