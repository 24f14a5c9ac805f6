// SPDX-License-Identifier: Apache-2.0
//! \file
//! The fitted cost model: `a + b n + c n^2` per module part and TP degree, least
//! squares over profiled points, with fit diagnostics.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/cost/quadratic_fit.hpp>
#include <dflop/error.hpp>

#include <algorithm>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! The fitted forward and backward times (seconds) of one part at one TP degree.
struct fitted_curve {
  module_piece piece;                        //!< module and part
  int tp = 1;                                //!< TP degree
  profile_size size = profile_size::tokens;  //!< what n counts
  quadratic_fit forward;                     //!< forward seconds vs n
  quadratic_fit backward;                    //!< backward seconds vs n

  friend bool operator==(const fitted_curve&, const fitted_curve&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const fitted_curve& curve) {
  return out << "fitted_curve{" << curve.piece << ", tp=" << curve.tp << ", size=" << curve.size
             << ", forward=" << curve.forward << ", backward=" << curve.backward << "}";
}

//! Fits one profiled curve, never bending down (`fit_nondecreasing_quadratic`:
//! the planner prices sizes far past a small profile's, where a free fit's
//! negative curvature would price the work at 0). Weights are 1/y^2 (relative
//! error) when every time is positive, else 1. \throws input_error naming the curve's first line when it has
//! fewer than 3 distinct sizes.
[[nodiscard]] inline fitted_curve fit_profile_curve(const profile_curve& measured) {
  if (measured.points.size() < 3)
    throw input_error(measured.source, measured.points.empty() ? 0 : measured.points.front().line,
                      "module '" + std::string(part_name(measured.piece.kind, measured.piece.part)) + "' at tp " +
                          std::to_string(measured.tp) + " has " + std::to_string(measured.points.size()) +
                          " sizes; a quadratic fit needs at least 3");
  auto fit = [&](auto value) {
    std::vector<fit_point> points;
    const bool relative = std::all_of(measured.points.begin(), measured.points.end(),
                                      [&](const profile_point& p) { return value(p) > 0; });
    for (const auto& p : measured.points)
      points.push_back({p.size, value(p), relative ? 1.0 / (value(p) * value(p)) : 1.0});
    return fit_nondecreasing_quadratic(points);
  };
  return {measured.piece, measured.tp, measured.size,
          fit([](const profile_point& p) { return p.forward_seconds; }),
          fit([](const profile_point& p) { return p.backward_seconds; })};
}

//! Prices a microbatch with fitted quadratics. LLM curves were measured on one
//! sequence of n tokens, so their quadratic term is attention and is summed per
//! packed sample: `a + b N + c sum(s_i^2)` (N tokens in all), the sum of the
//! samples' attention rather than the square of the packed length. Encoder curves
//! were measured on whole items, whose attention is already linear in the size, so
//! they are plain `a + b n + c n^2` in the microbatch's tokens or items. An empty
//! microbatch costs 0; a negative value (small sizes under a fit's negative
//! constant; fits never bend down) reads as 0. Missing
//! parts and TP degrees behave as in `table_cost_model`.
class fitted_cost_model {
public:
  //! From curves fitted elsewhere (a profiler). A (part, tp) may appear once.
  explicit fitted_cost_model(std::vector<fitted_curve> curves) : curves_(std::move(curves)) {
    for (std::size_t i = 0; i < curves_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (curves_[i].piece == curves_[j].piece && curves_[i].tp == curves_[j].tp)
          throw error("fitted_cost_model: two curves for '" +
                      std::string(part_name(curves_[i].piece.kind, curves_[i].piece.part)) + "' at tp " +
                      std::to_string(curves_[i].tp));
  }

  //! Fits every curve of `profiles`.
  [[nodiscard]] static fitted_cost_model from_profiles(std::span<const profile> profiles) {
    std::vector<fitted_curve> curves;
    for (const auto& table : profiles) {
      for (const auto& measured : table.curves) {
        for (const auto& existing : curves)
          if (existing.piece == measured.piece && existing.tp == measured.tp)
            throw input_error(measured.source, measured.points.front().line,
                              "module '" + std::string(part_name(measured.piece.kind, measured.piece.part)) +
                                  "' at tp " + std::to_string(measured.tp) + " is already in another profile");
        curves.push_back(fit_profile_curve(measured));
      }
    }
    return fitted_cost_model(std::move(curves));
  }

  //! Fits every curve of one profile.
  [[nodiscard]] static fitted_cost_model from_profile(const profile& table) {
    return from_profiles(std::span<const profile>(&table, 1));
  }

  //! See `cost_model`.
  [[nodiscard]] module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const {
    return estimate_parts(*this, kind, tp, microbatch);
  }

  //! The time of one part for a microbatch of `shape` at TP degree `tp`.
  [[nodiscard]] pass_time estimate_part(module_piece piece, int tp, const microbatch_shape& shape) const {
    const fitted_curve* found = detail::find_curve(curves_, piece, tp, "fitted_cost_model");
    if (!found || shape.tokens <= 0) return {};
    return {evaluate(found->forward, *found, shape), evaluate(found->backward, *found, shape)};
  }

  //! The fitted curves (with diagnostics).
  [[nodiscard]] std::span<const fitted_curve> curves() const noexcept { return curves_; }

private:
  [[nodiscard]] static double evaluate(const quadratic_fit& fit, const fitted_curve& curve,
                                       const microbatch_shape& shape) {
    double value = 0;
    if (curve.piece.kind == module_kind::llm)
      value = fit.a + fit.b * shape.tokens + fit.c * shape.squared_tokens;
    else
      value = fit(curve.size == profile_size::tokens ? shape.tokens : shape.units);
    return std::max(0.0, value);
  }

  std::vector<fitted_curve> curves_;
};

static_assert(cost_model<fitted_cost_model>);

}  // namespace dflop
