// SPDX-License-Identifier: Apache-2.0
//! \file
//! The profiled cost model: measured times per module part and TP degree,
//! interpolated piecewise-linearly in the microbatch size.
#pragma once

#include <dflop/cost/cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/piecewise_linear.hpp>
#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dflop {

//! Prices a microbatch from profile tables (profile.hpp). For each part and TP
//! degree the measured forward and backward times are interpolated
//! piecewise-linearly in the microbatch's size (tokens, or encoder items),
//! extended linearly past both ends (results below 0 read as 0).
//!
//! Profiles measure one sequence (LLM) or equal items (encoder) per size, but a
//! packed microbatch's attention is the sum over its samples (items), not one
//! long sequence's. So a layer's interpolated time T(x) is scaled by
//! `F(microbatch) / F(reference of size x)` with F the analytic layer FLOPs: the
//! profile supplies the achieved throughput at that size, the FLOPs the work.
//! A single profiled sequence is priced exactly as measured.
//!
//! A part profiled at no TP degree costs 0 (e.g. a profile without `lm_head`
//! rows); a part profiled at other degrees but not at the one asked, or layers
//! never profiled, raise `dflop::error`.
class table_cost_model {
public:
  //! One part at one TP degree, ready to evaluate.
  struct curve {
    module_piece piece;                        //!< module and part
    int tp = 1;                                //!< TP degree
    profile_size size = profile_size::tokens;  //!< what x counts
    piecewise_linear forward;                  //!< seconds vs x
    piecewise_linear backward;                 //!< seconds vs x
    std::optional<piecewise_linear> memory;    //!< activation bytes vs x, when profiled
    friend bool operator==(const curve&, const curve&) = default;
  };

  //! \param model shapes for the attention-aware scaling
  //! \param profiles one or more tables; a (part, tp) may appear in only one
  table_cost_model(multimodal_spec model, std::span<const profile> profiles) : model_(std::move(model)) {
    for (const profile& table : profiles)
      for (const profile_curve& measured : table.curves) {
        for (const auto& existing : curves_)
          if (existing.piece == measured.piece && existing.tp == measured.tp)
            throw input_error(measured.source, measured.points.front().line,
                              "module '" + std::string(part_name(measured.piece.kind, measured.piece.part)) +
                                  "' at tp " + std::to_string(measured.tp) + " is already in another profile");
        std::vector<curve_point> forward, backward, memory;
        bool has_memory = true;
        for (const auto& p : measured.points) {
          forward.push_back({p.size, p.forward_seconds});
          backward.push_back({p.size, p.backward_seconds});
          if (p.activation_bytes) memory.push_back({p.size, *p.activation_bytes});
          else has_memory = false;
        }
        curves_.push_back({measured.piece, measured.tp, measured.size, piecewise_linear(std::move(forward)),
                           piecewise_linear(std::move(backward)),
                           has_memory ? std::optional(piecewise_linear(std::move(memory))) : std::nullopt});
      }
  }

  //! From a single profile.
  table_cost_model(multimodal_spec model, const profile& table)
      : table_cost_model(std::move(model), std::span<const profile>(&table, 1)) {}

  //! From profile CSV files.
  [[nodiscard]] static table_cost_model from_files(multimodal_spec model, const std::vector<std::string>& paths) {
    std::vector<profile> profiles;
    for (const auto& path : paths) profiles.push_back(read_profile_file(path));
    return table_cost_model(std::move(model), profiles);
  }

  //! See `cost_model`.
  [[nodiscard]] module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const {
    return estimate_parts(*this, kind, tp, microbatch);
  }

  //! The time of one part for a microbatch of `shape` at TP degree `tp`.
  [[nodiscard]] pass_time estimate_part(module_piece piece, int tp, const microbatch_shape& shape) const {
    const curve* found = detail::find_curve(curves_, piece, tp, "table_cost_model");
    if (!found || shape.tokens <= 0) return {};
    const double x = size_of(*found, shape);
    const double scale = attention_scale(*found, shape, x);
    return {std::max(0.0, found->forward(x)) * scale, std::max(0.0, found->backward(x)) * scale};
  }

  //! Interpolated activation bytes of one part for `shape`, when the profile had `memory_mib`.
  [[nodiscard]] std::optional<double> estimate_activation_bytes(module_piece piece, int tp,
                                                                const microbatch_shape& shape) const {
    const curve* found = detail::find_curve(curves_, piece, tp, "table_cost_model");
    if (!found || !found->memory) return std::nullopt;
    if (shape.tokens <= 0) return 0.0;
    return std::max(0.0, (*found->memory)(size_of(*found, shape)));
  }

  //! The curves, one per (part, tp).
  [[nodiscard]] std::span<const curve> curves() const noexcept { return curves_; }
  //! The model used for scaling.
  [[nodiscard]] const multimodal_spec& model() const noexcept { return model_; }

private:
  [[nodiscard]] static double size_of(const curve& c, const microbatch_shape& shape) noexcept {
    return c.size == profile_size::tokens ? shape.tokens : shape.units;
  }
  // F(microbatch) / F(what the profile measured at size x), layers only (other parts are linear).
  [[nodiscard]] double attention_scale(const curve& c, const microbatch_shape& shape, double x) const noexcept {
    if (c.piece.part != module_part::layer) return 1.0;
    microbatch_shape reference;
    if (c.piece.kind == module_kind::llm) {
      reference = uniform_shape(1, x);
    } else {
      const auto per_item = static_cast<double>(model_.encoder.tokens_per_item());
      reference = c.size == profile_size::items ? uniform_shape(x, per_item) : uniform_shape(x / per_item, per_item);
    }
    const double measured = part_forward_flops(model_, c.piece, reference);
    return measured > 0 ? part_forward_flops(model_, c.piece, shape) / measured : 1.0;
  }

  multimodal_spec model_;
  std::vector<curve> curves_;
};

static_assert(cost_model<table_cost_model>);

}  // namespace dflop
