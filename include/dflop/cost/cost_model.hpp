// SPDX-License-Identifier: Apache-2.0
//! \file
//! The cost-model concept: how long one microbatch takes in one module, per
//! layer and for the module's extra parts, so a planner can price any
//! contiguous range of layers on a pipeline stage.
#pragma once

#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/cost/stage_slice.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/workload/sample.hpp>

#include <concepts>
#include <ostream>
#include <span>

namespace dflop {

//! Forward and backward time of one piece of work on one GPU, seconds.
struct pass_time {
  double forward = 0;   //!< forward pass, seconds
  double backward = 0;  //!< backward pass (including any recomputation), seconds

  //! forward + backward.
  [[nodiscard]] constexpr double total() const noexcept { return forward + backward; }

  friend constexpr pass_time operator+(pass_time a, pass_time b) noexcept {
    return {a.forward + b.forward, a.backward + b.backward};
  }
  friend constexpr pass_time operator*(double k, pass_time a) noexcept { return {k * a.forward, k * a.backward}; }
  friend bool operator==(const pass_time&, const pass_time&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const pass_time& time) {
  return out << "pass_time{forward=" << time.forward << ", backward=" << time.backward << "}";
}

//! What one microbatch costs in one module on one GPU of its TP group.
struct module_cost {
  pass_time layer;      //!< one transformer layer (all layers alike)
  pass_time embedding;  //!< patch embedding (encoder) / token embedding (LLM); first stage only
  pass_time head;       //!< projector (encoder) / final norm + LM head + loss (LLM); last stage only

  //! The time of a stage holding `slice`: layers x layer, plus embedding and head where held.
  [[nodiscard]] constexpr pass_time stage(const stage_slice& slice) const noexcept {
    pass_time time = static_cast<double>(slice.layers) * layer;
    if (slice.embedding) time = time + embedding;
    if (slice.head) time = time + head;
    return time;
  }

  //! The same with full activation recomputation when `recompute`: each layer's
  //! forward runs again inside the backward (embedding and head are kept).
  [[nodiscard]] constexpr pass_time stage(const stage_slice& slice, bool recompute) const noexcept {
    return stage_recomputing(slice, recompute ? slice.layers : 0);
  }

  //! The same when `recomputed` of the slice's layers redo their forward inside
  //! the backward (partial recomputation: the stage's first layers).
  [[nodiscard]] constexpr pass_time stage_recomputing(const stage_slice& slice, std::int64_t recomputed) const noexcept {
    pass_time time = stage(slice);
    time.backward += static_cast<double>(recomputed) * layer.forward;
    return time;
  }

  //! The whole module on one stage (`layers` layers, embedding and head).
  [[nodiscard]] constexpr pass_time whole(std::int64_t layers) const noexcept {
    return stage(stage_slice{layers, true, true});
  }

  friend bool operator==(const module_cost&, const module_cost&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const module_cost& cost) {
  return out << "module_cost{layer=" << cost.layer << ", embedding=" << cost.embedding << ", head=" << cost.head
             << "}";
}

//! The clauses of `cost_model`, named so that a diagnostic can say which one a
//! type misses (detail/concept_diagnostics.hpp); `cost_model` is their conjunction.
namespace concept_clauses {
//! `estimate_time(kind, tp, microbatch)` can be called on a *const* model
//! (a missing member, a non-const one and wrong parameters all fail here).
template <class Model>
concept cost_model_estimate_time_callable =
    requires(const Model& model, module_kind kind, int tp, std::span<const sample> microbatch) {
      model.estimate_time(kind, tp, microbatch);
    };

//! ... and returns exactly `module_cost` (not something convertible: the
//! planner adds and scales the parts).
template <class Model>
concept cost_model_estimate_time_returns_module_cost =
    requires(const Model& model, module_kind kind, int tp, std::span<const sample> microbatch) {
      { model.estimate_time(kind, tp, microbatch) } -> std::same_as<module_cost>;
    };
}  // namespace concept_clauses

//! A cost model prices one microbatch (its samples, packed: variable-length
//! attention, no padding) in one module at TP degree `tp` (times are per GPU
//! of the TP group, TP communication included). Satisfied by
//! `flops_cost_model`, `table_cost_model` and `fitted_cost_model`.
//!
//!     module_cost estimate_time(module_kind kind, int tp, std::span<const sample> microbatch) const;
//!
//! An empty microbatch (or, for the encoder, one of text samples only) costs 0.
template <class Model>
concept cost_model = concept_clauses::cost_model_estimate_time_callable<Model> &&
                     concept_clauses::cost_model_estimate_time_returns_module_cost<Model>;

//! The `estimate_time` of a model that prices each part from the microbatch's
//! shape (`model.estimate_part(piece, tp, shape)`): every shipped cost model.
template <class ShapeModel>
[[nodiscard]] module_cost estimate_parts(const ShapeModel& model, module_kind kind, int tp,
                                         std::span<const sample> microbatch) {
  const microbatch_shape shape = shape_of(kind, microbatch);
  return {model.estimate_part({kind, module_part::layer}, tp, shape),
          model.estimate_part({kind, module_part::embedding}, tp, shape),
          model.estimate_part({kind, module_part::head}, tp, shape)};
}

}  // namespace dflop
