// SPDX-License-Identifier: Apache-2.0
//! \file
//! Memory per GPU from the model's shapes: weights, gradients and optimizer
//! states sharded by TP (and optionally across DP), activations from a
//! per-token-per-layer formula, times the microbatches in flight.
#pragma once

#include <dflop/cost/memory_model.hpp>
#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/util/saturating.hpp>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>

namespace dflop {

//! Bytes per parameter and per activation element. The default is Megatron-LM's
//! bf16 mixed precision: bf16 weights (2) + fp32 gradient accumulation buffer (4)
//! + fp32 master weights and Adam first and second moments (4 + 4 + 4 = 12),
//! i.e. 18 bytes per parameter; bf16 activations (2).
struct precision_config {
  std::int64_t weight_bytes = 2;      //!< per parameter: the working copy
  std::int64_t gradient_bytes = 4;    //!< per parameter: the gradient buffer
  std::int64_t optimizer_bytes = 12;  //!< per parameter: master weights + optimizer moments
  std::int64_t activation_bytes = 2;  //!< per stored activation element

  friend bool operator==(const precision_config&, const precision_config&) = default;
};

//! Knobs of `analytic_memory_model`.
struct memory_options {
  precision_config precision;            //!< bytes per parameter and activation element
  bool recompute_activations = false;    //!< full activation recomputation (store layer inputs only)
  std::int64_t optimizer_shards = 1;     //!< optimizer states split over this many DP ranks (ZeRO-1); 1 = none

  friend bool operator==(const memory_options&, const memory_options&) = default;
};

//! Activation elements stored per token by one layer without recomputation
//! (flash attention: no s^2 score matrix; no dropout):
//! norm-1 input h, norm-1 output h, Q K V h (1 + 2 g/a), attention output h,
//! norm-2 input h, norm-2 output h, then the MLP: gated (gate, up, their
//! product: 3f) or plain (fc1 output, GELU output: 2f). Total h (6 + 2 g/a) + 3f or + 2f.
[[nodiscard]] constexpr std::int64_t layer_activation_elements_per_token(std::int64_t hidden, std::int64_t heads,
                                                                         std::int64_t kv_heads, std::int64_t ffn,
                                                                         bool gated_mlp) noexcept {
  return 6 * hidden + 2 * (hidden / heads) * kv_heads + (gated_mlp ? 3 : 2) * ffn;
}

//! The analytic memory model. Per GPU of a stage at TP degree t:
//! - parameters P = (layers x layer weights + embedding weights if held + head weights if held) / t
//!   (rounded up); parameters, gradients and optimizer states are P times the bytes of
//!   `precision_config`; optimizer states further divided by `optimizer_shards`;
//! - activations per microbatch of N tokens, bytes, all divided by t (tensor + sequence parallelism):
//!   layers x N x `layer_activation_elements_per_token` x 2 without recomputation;
//!   with it, each recomputed layer keeps N x h x 2 (its input; every layer with full
//!   recomputation, the stage's first k with `memory_choices::recompute_layers` = k), the
//!   others their full set, plus one layer's full set once per stage (the layer being
//!   recomputed); the embedding stores nothing extra (its output is layer
//!   0's input); the LM head stores the final norm input and output (2 x 2h) plus the logits in
//!   bf16 and fp32 for the loss (6 V) per token; the encoder's patch embedding stores the pixels
//!   (3 p^2 x 2, not sharded by t) and the projector its input, hidden and GELU output
//!   (2 (h_enc + 2 h_llm)) per token;
//! - activations in total = in_flight x per-microbatch bytes (+ the recompute working set).
class analytic_memory_model {
public:
  //! \param model the shapes to count
  //! \param options precision, recomputation, optimizer sharding
  explicit analytic_memory_model(multimodal_spec model, memory_options options = {})
      : model_(std::move(model)), options_(options) {
    if (options_.optimizer_shards < 1)
      throw error("analytic_memory_model: optimizer_shards must be >= 1, got " +
                  std::to_string(options_.optimizer_shards));
  }

  //! See `memory_model`: the model's own options.
  [[nodiscard]] memory_breakdown estimate_memory(module_kind kind, int tp, stage_slice slice, int in_flight,
                                                 std::span<const sample> microbatch) const {
    return estimate_memory(kind, tp, slice, in_flight, microbatch,
                           {options_.recompute_activations, options_.optimizer_shards});
  }

  //! See `memory_model_with_choices`: `choices` instead of the options' recomputation and sharding.
  [[nodiscard]] memory_breakdown estimate_memory(module_kind kind, int tp, stage_slice slice, int in_flight,
                                                 std::span<const sample> microbatch,
                                                 const memory_choices& choices) const {
    if (tp < 1) throw error("estimate_memory: TP degree must be >= 1, got " + std::to_string(tp));
    if (in_flight < 0) throw error("estimate_memory: in_flight must be >= 0, got " + std::to_string(in_flight));
    if (slice.layers < 0) throw error("estimate_memory: negative layer count " + std::to_string(slice.layers));
    if (choices.optimizer_shards < 1)
      throw error("estimate_memory: optimizer_shards must be >= 1, got " + std::to_string(choices.optimizer_shards));
    const std::int64_t parameters = ceil_div(stage_parameters(kind, slice), tp);
    const auto& precision = options_.precision;
    memory_breakdown memory;
    memory.parameters = saturating_mul(parameters, precision.weight_bytes);
    memory.gradients = saturating_mul(parameters, precision.gradient_bytes);
    memory.optimizer_states = ceil_div(saturating_mul(parameters, precision.optimizer_bytes), choices.optimizer_shards);
    if (choices.recompute_layers < 0)
      throw error("estimate_memory: recompute_layers must be >= 0 (0: all), got " +
                  std::to_string(choices.recompute_layers));
    memory.activations = activation_bytes_recomputing(kind, tp, slice, in_flight, shape_of(kind, microbatch),
                                                      recomputed_layers(choices, slice.layers));
    return memory;
  }

  //! Unsharded weights of the pieces of `kind` that `slice` holds.
  [[nodiscard]] std::int64_t stage_parameters(module_kind kind, stage_slice slice) const noexcept {
    if (kind == module_kind::encoder)
      return slice.layers * model_.encoder.layer_parameters() +
             (slice.embedding ? model_.encoder.embedding_parameters() : 0) +
             (slice.head ? model_.projector.parameters() : 0);
    return slice.layers * model_.llm.layer_parameters() + (slice.embedding ? model_.llm.embedding_parameters() : 0) +
           (slice.head ? model_.llm.head_parameters() : 0);
  }

  //! Bytes per activation element (`precision_config::activation_bytes`): what
  //! stage-to-stage sends and encoder hand-offs are priced with.
  [[nodiscard]] std::int64_t activation_element_bytes() const noexcept { return options_.precision.activation_bytes; }

  //! Activation bytes per GPU for `in_flight` microbatches of `shape` (see the class comment).
  [[nodiscard]] std::int64_t activation_bytes(module_kind kind, int tp, stage_slice slice, int in_flight,
                                              const microbatch_shape& shape) const {
    return activation_bytes(kind, tp, slice, in_flight, shape, options_.recompute_activations);
  }

  //! Activation bytes with recomputation on or off regardless of the options.
  [[nodiscard]] std::int64_t activation_bytes(module_kind kind, int tp, stage_slice slice, int in_flight,
                                              const microbatch_shape& shape, bool recompute) const {
    return activation_bytes_recomputing(kind, tp, slice, in_flight, shape, recompute ? slice.layers : 0);
  }

  //! Activation bytes when `recomputed` of the slice's layers (0..layers)
  //! recompute: those keep their input only, the others their full set, and
  //! the layer being recomputed needs its full set once per stage.
  [[nodiscard]] std::int64_t activation_bytes_recomputing(module_kind kind, int tp, stage_slice slice, int in_flight,
                                                          const microbatch_shape& shape,
                                                          std::int64_t recomputed) const {
    if (recomputed < 0 || recomputed > slice.layers)
      throw error("activation_bytes: " + std::to_string(recomputed) + " recomputed layers of a stage with " +
                  std::to_string(slice.layers));
    // A token count beyond 64 bits (only a corrupt input has one) needs more bytes than any device.
    if (!(shape.tokens < 0x1p63)) return saturated_count;
    const auto tokens = static_cast<std::int64_t>(std::llround(shape.tokens));
    const std::int64_t element = options_.precision.activation_bytes;
    const bool encoder = kind == module_kind::encoder;
    const std::int64_t hidden = encoder ? model_.encoder.hidden : model_.llm.hidden;
    const std::int64_t full_layer =
        encoder ? layer_activation_elements_per_token(hidden, model_.encoder.heads, model_.encoder.kv_heads,
                                                      model_.encoder.ffn, false)
                : layer_activation_elements_per_token(hidden, model_.llm.heads, model_.llm.kv_heads, model_.llm.ffn,
                                                      true);
    std::int64_t sharded = (recomputed * hidden + (slice.layers - recomputed) * full_layer) * element;  // per token, before / tp
    std::int64_t replicated = 0;                                   // per token, not sharded
    if (slice.head)
      sharded += encoder ? (model_.projector.input_hidden + 2 * model_.projector.output_hidden) * element
                         : 2 * hidden * element + 6 * model_.llm.vocab;
    if (slice.embedding && encoder) replicated += 3 * model_.encoder.patch_size * model_.encoder.patch_size * element;
    // Per-token figures are model constants; products with token counts saturate (see saturating.hpp).
    const std::int64_t per_microbatch =
        saturating_add(ceil_div(saturating_mul(tokens, sharded), tp), saturating_mul(tokens, replicated));
    std::int64_t total = saturating_mul(in_flight, per_microbatch);
    if (recomputed > 0 && in_flight > 0)
      total = saturating_add(total, ceil_div(saturating_mul(saturating_mul(tokens, full_layer), element), tp));
    return total;
  }

  //! The model whose shapes are counted.
  [[nodiscard]] const multimodal_spec& model() const noexcept { return model_; }
  //! The options in use.
  [[nodiscard]] const memory_options& options() const noexcept { return options_; }

private:
  // Saturated stays saturated: a / b rounded up, without the overflow of a + b - 1.
  static constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
    return a == saturated_count ? a : a / b + (a % b != 0);
  }
  multimodal_spec model_;
  memory_options options_;
};

static_assert(memory_model_with_choices<analytic_memory_model>);

}  // namespace dflop
