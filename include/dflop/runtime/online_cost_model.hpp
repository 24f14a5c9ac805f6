// SPDX-License-Identifier: Apache-2.0
//! \file
//! A cost model that keeps learning while training runs: the fitted form
//! (`a + b N + c sum(s_i^2)` per part, TP degree and pass, as in
//! `fitted_cost_model`) re-estimated by recursive least squares with forgetting
//! from the op times the executor measures. It models `cost_model`, so the
//! packer and the batch scheduler price later batches with the refined costs.
//!
//!     dflop::online_cost_model online(dflop::fitted_cost_model::from_profile(table));
//!     // after each iteration, for each measured op:
//!     online.update(dflop::observe_microbatch({dflop::module_kind::llm, dflop::module_part::layer}, tp,
//!                                             microbatch, dflop::cost_pass::forward, seconds));
//!     online.prediction_errors().rolling_mean;   // how well it predicts now
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/cost/quadratic_fit.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/runtime/recursive_least_squares.hpp>
#include <dflop/workload/sample.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! Which pass of an op an observation timed.
enum class cost_pass : std::uint8_t {
  forward,   //!< the forward pass
  backward,  //!< the whole backward pass (input and weight gradients)
};

//! "forward" or "backward".
[[nodiscard]] constexpr std::string_view to_string(cost_pass pass) noexcept {
  return pass == cost_pass::forward ? "forward" : "backward";
}

inline std::ostream& operator<<(std::ostream& out, cost_pass pass) { return out << to_string(pass); }

//! One measured op: what ran (part, TP degree, microbatch shape, pass) and how long it took.
struct cost_observation {
  module_piece piece;                 //!< module and part the time belongs to
  int tp = 1;                         //!< TP degree it ran at
  microbatch_shape shape;             //!< the microbatch as that module saw it
  cost_pass pass = cost_pass::forward;  //!< which pass was timed
  double seconds = 0;                 //!< measured time of one instance of the part (one layer), >= 0

  friend bool operator==(const cost_observation&, const cost_observation&) = default;
};

//! An observation of `microbatch`'s samples (their shape in `piece.kind`).
[[nodiscard]] inline cost_observation observe_microbatch(module_piece piece, int tp,
                                                         std::span<const sample> microbatch, cost_pass pass,
                                                         double seconds) {
  return {piece, tp, shape_of(piece.kind, microbatch), pass, seconds};
}

//! Knobs of `online_cost_model`.
struct online_options {
  double forgetting = 0.98;  //!< weight kept by past observations per update of a curve, in (0, 1]: memory ~ 1 / (1 - forgetting) updates
  //! Prior standard deviation of the seed's coefficients, relative to the seed's time at
  //! the reference size, > 0: larger trusts the seed less and moves faster at first.
  double uncertainty = 1.0;
  std::size_t error_window = 10;   //!< updates the rolling prediction error averages, >= 1
  double reference_tokens = 4096;  //!< a typical size in tokens (only conditions the estimator), > 0
  double reference_items = 16;     //!< a typical size in encoder items (likewise), > 0

  friend bool operator==(const online_options&, const online_options&) = default;
};

//! How well the model predicted the op times it was given, before learning from them.
struct prediction_error_summary {
  double last = 0;             //!< |predicted - measured| / measured of the latest update
  double rolling_mean = 0;     //!< mean of that over the last `window` updates
  std::size_t window = 0;      //!< updates in the rolling mean (up to `online_options::error_window`)
  std::size_t updates = 0;     //!< updates so far

  friend bool operator==(const prediction_error_summary&, const prediction_error_summary&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const prediction_error_summary& errors) {
  return out << "prediction_error_summary{last=" << errors.last << ", rolling_mean=" << errors.rolling_mean
             << ", window=" << errors.window << ", updates=" << errors.updates << "}";
}

//! Where `online_cost_model::from_cost_model` samples a cost model to seed the fit.
struct seed_grid {
  std::vector<int> tp_degrees{1};                                  //!< TP degrees to seed, >= 1
  std::vector<double> llm_tokens{512, 1024, 2048, 4096, 8192};     //!< one sequence of this many tokens
  std::vector<double> encoder_items{1, 2, 4, 8, 16, 32};           //!< this many items of the model's size
};

//! Prices microbatches with per-(part, TP degree, pass) curves of the fitted form,
//! refined by `update`. Between updates it is an ordinary `cost_model`; a part the
//! seed does not price costs 0 and cannot be refined. Features are scaled by the
//! reference size and times by each curve's seed time there, so the estimator is
//! well conditioned for any units; each observation is weighted 1 / measured^2
//! (relative error), as in the offline fit.
//!
//! Not synchronized: update and price on one thread, or hand other threads a copy
//! (it is a value type) or `snapshot()`.
class online_cost_model {
public:
  //! One refined curve (both passes of one part at one TP degree).
  struct curve {
    module_piece piece;                        //!< module and part
    int tp = 1;                                //!< TP degree
    profile_size size = profile_size::tokens;  //!< what n counts for encoder parts (LLM parts: tokens)
    double size_scale = 1;                     //!< features use n / size_scale
    std::array<double, 2> time_scale{1, 1};    //!< seconds per unit of the estimate, forward and backward
    std::array<recursive_least_squares<3>, 2> passes;  //!< normalized [a, b, c], forward and backward
  };

  //! Starts from `seed`'s curves. \throws dflop::error naming the option out of range.
  explicit online_cost_model(const fitted_cost_model& seed, online_options options = {}) : options_(options) {
    if (!(options_.reference_tokens > 0) || !(options_.reference_items > 0))
      throw error("online_cost_model: reference_tokens and reference_items must be > 0");
    if (options_.error_window < 1) throw error("online_cost_model: error_window must be >= 1");
    for (const fitted_curve& fitted : seed.curves()) {
      const double s = fitted.piece.kind == module_kind::encoder && fitted.size == profile_size::items
                           ? options_.reference_items
                           : options_.reference_tokens;
      const auto seed_pass = [&](const quadratic_fit& fit, double& time_scale) {
        const double at_reference = fit.a + fit.b * s + fit.c * s * s;
        time_scale = at_reference > 0 ? at_reference : 1e-3;
        return recursive_least_squares<3>({fit.a / time_scale, fit.b * s / time_scale, fit.c * s * s / time_scale},
                                          options_.uncertainty, options_.forgetting);
      };
      double forward_scale = 1, backward_scale = 1;
      auto forward = seed_pass(fitted.forward, forward_scale);
      auto backward = seed_pass(fitted.backward, backward_scale);
      curves_.push_back({fitted.piece, fitted.tp, fitted.size, s, {forward_scale, backward_scale},
                         {std::move(forward), std::move(backward)}});
    }
  }

  //! Seeds from any cost model: prices one LLM sequence of each `grid.llm_tokens`
  //! and encoder batches of each `grid.encoder_items` items (of `model`'s tokens per
  //! item) at each TP degree, fits the fitted form per part and pass, and starts
  //! from that. Parts priced 0 at every size and degree are left out (they stay 0).
  //! \throws input_error from the fit when a size list has fewer than 3 distinct sizes.
  template <cost_model Model>
  [[nodiscard]] static online_cost_model from_cost_model(const Model& cost, const multimodal_spec& model,
                                                         const seed_grid& grid = {}, online_options options = {}) {
    const std::string source = "online_cost_model seed";
    std::array<profile, 2> tables{profile{source, profile_size::tokens, {}}, profile{source, profile_size::items, {}}};
    for (int tp : grid.tp_degrees) {
      if (tp < 1) throw input_error(source, 0, "seed_grid::tp_degrees: TP degree " + std::to_string(tp) + " is < 1");
      for (module_kind kind : all_module_kinds) {
        const auto& sizes = kind == module_kind::llm ? grid.llm_tokens : grid.encoder_items;
        if (sizes.empty()) continue;
        std::array<profile_curve, 3> parts;
        for (std::size_t p = 0; p < 3; ++p)
          parts[p] = {{kind, all_module_parts[p]}, tp,
                      kind == module_kind::llm ? profile_size::tokens : profile_size::items, {}, source};
        for (double size : sizes) {
          if (!(size >= 1))
            throw input_error(source, 0, "seed_grid: size " + std::to_string(size) + " of " +
                                             std::string(to_string(kind)) + " is < 1");
          const auto count = static_cast<std::int64_t>(std::llround(size));
          const auto tokens_per_item = model.encoder.tokens_per_item();
          const sample probe = kind == module_kind::llm
                                   ? sample{"seed", modality::text, 0, 0, count}
                                   : sample{"seed", modality::image, count, count * tokens_per_item, 1};
          const module_cost priced = cost.estimate_time(kind, tp, std::span<const sample>(&probe, 1));
          for (std::size_t p = 0; p < 3; ++p) {
            const pass_time t = all_module_parts[p] == module_part::layer       ? priced.layer
                                : all_module_parts[p] == module_part::embedding ? priced.embedding
                                                                                : priced.head;
            parts[p].points.push_back({static_cast<double>(count), t.forward, t.backward, std::nullopt, 0});
          }
        }
        for (auto& part : parts) tables[kind == module_kind::llm ? 0 : 1].curves.push_back(std::move(part));
      }
    }
    // A part priced at no size and no degree stays unpriced (0); one priced at some degree keeps every degree.
    const auto priced = [](const profile_curve& curve) {
      return std::any_of(curve.points.begin(), curve.points.end(), [](const profile_point& point) {
        return point.forward_seconds > 0 || point.backward_seconds > 0;
      });
    };
    std::vector<profile> used;
    for (auto& table : tables) {
      std::vector<profile_curve> kept;
      for (const auto& curve : table.curves) {
        bool keep = curve.piece.part == module_part::layer;
        for (const auto& other : table.curves) keep = keep || (other.piece == curve.piece && priced(other));
        if (keep) kept.push_back(curve);
      }
      table.curves = std::move(kept);
      if (!table.curves.empty()) used.push_back(std::move(table));
    }
    return online_cost_model(fitted_cost_model::from_profiles(used), options);
  }

  //! See `cost_model`.
  [[nodiscard]] module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const {
    return estimate_parts(*this, kind, tp, microbatch);
  }

  //! The time of one part for a microbatch of `shape` at TP degree `tp` (as `fitted_cost_model`).
  [[nodiscard]] pass_time estimate_part(module_piece piece, int tp, const microbatch_shape& shape) const {
    const curve* found = detail::find_curve(curves_, piece, tp, "online_cost_model");
    if (!found || shape.tokens <= 0) return {};
    return {predict(*found, cost_pass::forward, shape), predict(*found, cost_pass::backward, shape)};
  }

  //! Learns from one measured op. Returns the relative error of the prediction made
  //! before learning (|predicted - measured| / measured; for a measurement of 0: 0 when
  //! 0 was predicted, else 1), or nullopt for an empty microbatch (nothing to learn).
  //! \throws dflop::error naming the part and TP degree when the seed has no curve for
  //! them, or the field when the observation is malformed (TP < 1, negative or
  //! non-finite time or shape).
  std::optional<double> update(const cost_observation& observation) {
    const std::string what = "online_cost_model::update ('" +
                             std::string(part_name(observation.piece.kind, observation.piece.part)) + "' at tp " +
                             std::to_string(observation.tp) + ", " + std::string(to_string(observation.pass)) + ")";
    if (observation.tp < 1) throw error(what + ": TP degree must be >= 1");
    if (!std::isfinite(observation.seconds) || observation.seconds < 0)
      throw error(what + ": measured seconds must be finite and >= 0, got " + std::to_string(observation.seconds));
    const microbatch_shape& shape = observation.shape;
    for (double field : {shape.units, shape.tokens, shape.squared_tokens})
      if (!std::isfinite(field) || field < 0) throw error(what + ": the microbatch shape must be finite and >= 0");
    const curve* priced = detail::find_curve(curves_, observation.piece, observation.tp, "online_cost_model");
    if (!priced) throw error(what + ": the seed model does not price this part, so there is nothing to refine");
    curve* found = &curves_[static_cast<std::size_t>(priced - curves_.data())];
    if (shape.tokens <= 0) return std::nullopt;

    const auto pass = static_cast<std::size_t>(observation.pass);
    const double predicted = predict(*found, observation.pass, shape);
    const double measured = observation.seconds;
    const double relative = measured > 0 ? std::abs(predicted - measured) / measured : (predicted > 0 ? 1.0 : 0.0);
    const double scale = found->time_scale[pass];
    const double target = measured / scale;
    const double reference = target > 0 ? target : predicted / scale;
    found->passes[pass].update(features(*found, shape), target, reference > 0 ? 1.0 / (reference * reference) : 1.0);
    record(relative);
    return relative;
  }

  //! `update` for the samples of one microbatch.
  std::optional<double> update(module_piece piece, int tp, std::span<const sample> microbatch, cost_pass pass,
                               double seconds) {
    return update(observe_microbatch(piece, tp, microbatch, pass, seconds));
  }

  //! Prediction errors so far (relative, before each update).
  [[nodiscard]] prediction_error_summary prediction_errors() const noexcept {
    prediction_error_summary summary;
    summary.updates = updates_;
    summary.window = recent_.size();
    if (!recent_.empty()) {
      summary.last = recent_.back();
      double sum = 0;
      for (double e : recent_) sum += e;
      summary.rolling_mean = sum / static_cast<double>(recent_.size());
    }
    return summary;
  }

  //! The current curves as an immutable `fitted_cost_model` (same prices; fit
  //! diagnostics 0, `points` = updates of that pass): for another thread or a log.
  [[nodiscard]] fitted_cost_model snapshot() const {
    std::vector<fitted_curve> fitted;
    for (const curve& c : curves_) {
      const auto pass_fit = [&](std::size_t pass) {
        const auto& theta = c.passes[pass].coefficients();
        const double t = c.time_scale[pass], s = c.size_scale;
        return quadratic_fit{t * theta[0], t * theta[1] / s, t * theta[2] / (s * s), 0, 0, c.passes[pass].updates()};
      };
      fitted.push_back({c.piece, c.tp, c.size, pass_fit(0), pass_fit(1)});
    }
    return fitted_cost_model(std::move(fitted));
  }

  //! The curves being refined.
  [[nodiscard]] std::span<const curve> curves() const noexcept { return curves_; }
  //! The options in use.
  [[nodiscard]] const online_options& options() const noexcept { return options_; }

private:
  // [1, n / s, q / s^2]: q is sum(s_i^2) for LLM parts (attention per packed sample), n^2 for encoder parts.
  [[nodiscard]] static std::array<double, 3> features(const curve& c, const microbatch_shape& shape) noexcept {
    const double s = c.size_scale;
    if (c.piece.kind == module_kind::llm) return {1.0, shape.tokens / s, shape.squared_tokens / (s * s)};
    const double n = (c.size == profile_size::tokens ? shape.tokens : shape.units) / s;
    return {1.0, n, n * n};
  }

  [[nodiscard]] static double predict(const curve& c, cost_pass pass, const microbatch_shape& shape) noexcept {
    const auto index = static_cast<std::size_t>(pass);
    return std::max(0.0, c.time_scale[index] * c.passes[index].predict(features(c, shape)));
  }

  void record(double relative) {
    ++updates_;
    recent_.push_back(relative);
    while (recent_.size() > options_.error_window) recent_.pop_front();
  }

  online_options options_;
  std::vector<curve> curves_;
  std::deque<double> recent_;
  std::size_t updates_ = 0;
};

static_assert(cost_model<online_cost_model>);

}  // namespace dflop
