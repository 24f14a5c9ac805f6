// SPDX-License-Identifier: Apache-2.0
//! \file
//! The memory-model concept: bytes one GPU of a pipeline stage needs, split into
//! parameters, gradients, optimizer states and activations.
#pragma once

#include <dflop/cost/stage_slice.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/util/saturating.hpp>
#include <dflop/workload/sample.hpp>

#include <concepts>
#include <cstdint>
#include <ostream>
#include <span>

namespace dflop {

//! Bytes on one GPU, by what holds them.
struct memory_breakdown {
  std::int64_t parameters = 0;        //!< model weights (bf16 by default)
  std::int64_t gradients = 0;         //!< weight gradients (fp32 accumulation by default)
  std::int64_t optimizer_states = 0;  //!< fp32 master weights + Adam moments by default
  std::int64_t activations = 0;       //!< stored for backward, all microbatches in flight

  //! Everything together; `saturated_count` when the sum exceeds 64 bits.
  [[nodiscard]] constexpr std::int64_t total() const noexcept {
    return saturating_add(saturating_add(parameters, gradients), saturating_add(optimizer_states, activations));
  }

  friend bool operator==(const memory_breakdown&, const memory_breakdown&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const memory_breakdown& memory) {
  return out << "memory_breakdown{parameters=" << memory.parameters << ", gradients=" << memory.gradients
             << ", optimizer_states=" << memory.optimizer_states << ", activations=" << memory.activations
             << ", total=" << memory.total() << "}";
}

//! The clauses of `memory_model`, named so that a diagnostic can say which one
//! a type misses (detail/concept_diagnostics.hpp); `memory_model` is their conjunction.
namespace concept_clauses {
//! `estimate_memory(kind, tp, slice, in_flight, microbatch)` can be called on a
//! *const* model (a missing member, a non-const one and wrong parameters all fail here).
template <class Model>
concept memory_model_estimate_memory_callable = requires(const Model& model, module_kind kind, int tp,
                                                         stage_slice slice, int in_flight,
                                                         std::span<const sample> microbatch) {
  model.estimate_memory(kind, tp, slice, in_flight, microbatch);
};

//! ... and returns exactly `memory_breakdown`.
template <class Model>
concept memory_model_estimate_memory_returns_breakdown = requires(const Model& model, module_kind kind, int tp,
                                                                  stage_slice slice, int in_flight,
                                                                  std::span<const sample> microbatch) {
  { model.estimate_memory(kind, tp, slice, in_flight, microbatch) } -> std::same_as<memory_breakdown>;
};
}  // namespace concept_clauses

//! A memory model says what one GPU of a stage needs when the stage holds
//! `slice` of module `kind` at TP degree `tp` and keeps `in_flight` microbatches
//! like `microbatch` alive (1F1B: stage s of S holds up to S - s). Satisfied by
//! `analytic_memory_model`.
//!
//! Semantic requirements the planner relies on: more tokens in a module's
//! microbatch never need fewer bytes (it finds the samples that cannot fit
//! anywhere by bisecting over token counts), and counts too large for 64 bits
//! saturate at `saturated_count` rather than wrap.
//!
//!     memory_breakdown estimate_memory(module_kind kind, int tp, stage_slice slice, int in_flight,
//!                                      std::span<const sample> microbatch) const;
template <class Model>
concept memory_model = concept_clauses::memory_model_estimate_memory_callable<Model> &&
                       concept_clauses::memory_model_estimate_memory_returns_breakdown<Model>;

//! Memory-saving techniques a plan may turn on per module, trading time or
//! communication for bytes: the planner tries them on configurations that do
//! not fit without them.
struct memory_choices {
  bool recompute_activations = false;  //!< activation recomputation: keep layer inputs, redo the forward in backward
  std::int64_t optimizer_shards = 1;   //!< optimizer states split over this many DP ranks (distributed optimizer); 1 = none
  //! With `recompute_activations`: a stage recomputes its first this many layers
  //! (Megatron-LM's block method); 0: all of them (full recomputation).
  std::int64_t recompute_layers = 0;

  friend bool operator==(const memory_choices&, const memory_choices&) = default;
};

//! How many of a stage's `stage_layers` layers `choices` recomputes.
[[nodiscard]] constexpr std::int64_t recomputed_layers(const memory_choices& choices,
                                                       std::int64_t stage_layers) noexcept {
  if (!choices.recompute_activations) return 0;
  return choices.recompute_layers > 0 && choices.recompute_layers < stage_layers ? choices.recompute_layers
                                                                                 : stage_layers;
}

//! A memory model that can also price `memory_choices` (per call, so one model
//! serves every candidate). Satisfied by `analytic_memory_model`; the planner
//! tries recomputation and optimizer sharding only with such a model.
//!
//!     memory_breakdown estimate_memory(module_kind kind, int tp, stage_slice slice, int in_flight,
//!                                      std::span<const sample> microbatch, const memory_choices& choices) const;
template <class Model>
concept memory_model_with_choices =
    memory_model<Model> && requires(const Model& model, module_kind kind, int tp, stage_slice slice, int in_flight,
                                    std::span<const sample> microbatch, const memory_choices& choices) {
      { model.estimate_memory(kind, tp, slice, in_flight, microbatch, choices) } -> std::same_as<memory_breakdown>;
    };

//! `memory.estimate_memory` with `choices`; a model without choices is only
//! asked about the default (no recomputation, no sharding).
template <memory_model Model>
[[nodiscard]] memory_breakdown estimate_memory_with(const Model& memory, module_kind kind, int tp, stage_slice slice,
                                                    int in_flight, std::span<const sample> microbatch,
                                                    const memory_choices& choices) {
  if constexpr (memory_model_with_choices<Model>)
    return memory.estimate_memory(kind, tp, slice, in_flight, microbatch, choices);
  else
    return memory.estimate_memory(kind, tp, slice, in_flight, microbatch);
}

//! Bytes per activation element in the memory model's precision: what one
//! element of a hidden state takes when a stage sends it to the next or an
//! encoder hands its projected tokens to the LLM. A model may say with
//! `std::int64_t activation_element_bytes() const`; otherwise bf16's 2, the
//! precision the shipped models assume.
template <memory_model Model>
[[nodiscard]] std::int64_t activation_element_bytes(const Model& memory) {
  if constexpr (requires { { memory.activation_element_bytes() } -> std::convertible_to<std::int64_t>; })
    return memory.activation_element_bytes();
  else
    return 2;
}

}  // namespace dflop
