// SPDX-License-Identifier: Apache-2.0
//! \file
//! Analytic forward FLOPs of every part of a multimodal model (REFERENCE.md
//! section 5). A multiply-add counts 2 FLOPs. Training costs 3x forward
//! (backward = 2x), 4x with full activation recomputation.
#pragma once

#include <dflop/cost/microbatch_shape.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/model/multimodal_spec.hpp>

namespace dflop {

//! Decoder layer: `2 N h^2 (2 + 2 g/a) + 2 h sum(s_i^2) + 6 N h f`. For one
//! sequence of s tokens that is `2 s h^2 (2 + 2g/a) + 2 s^2 h + 6 s h f`: QKV and
//! output projections, causal attention (QK^T and PV, half of 4 s^2 h), gated MLP.
[[nodiscard]] constexpr double layer_forward_flops(const llm_spec& llm, const microbatch_shape& shape) noexcept {
  const auto h = static_cast<double>(llm.hidden);
  const double kv_ratio = static_cast<double>(llm.kv_heads) / static_cast<double>(llm.heads);
  return 2 * shape.tokens * h * h * (2 + 2 * kv_ratio) + 2 * h * shape.squared_tokens +
         6 * shape.tokens * h * static_cast<double>(llm.ffn);
}

//! ViT layer: `2 N h^2 (2 + 2 g/a) + 4 h sum(n_i^2) + 4 N h f`; for one item of n
//! tokens with g = a that is `8 n h^2 + 4 n^2 h + 4 n h f` (full, non-causal attention; plain MLP).
[[nodiscard]] constexpr double layer_forward_flops(const vit_spec& vit, const microbatch_shape& shape) noexcept {
  const auto h = static_cast<double>(vit.hidden);
  const double kv_ratio = static_cast<double>(vit.kv_heads) / static_cast<double>(vit.heads);
  return 2 * shape.tokens * h * h * (2 + 2 * kv_ratio) + 4 * h * shape.squared_tokens +
         4 * shape.tokens * h * static_cast<double>(vit.ffn);
}

//! LM head: `2 N h V` (the final norm and the loss are negligible).
[[nodiscard]] constexpr double lm_head_forward_flops(const llm_spec& llm, const microbatch_shape& shape) noexcept {
  return 2 * shape.tokens * static_cast<double>(llm.hidden) * static_cast<double>(llm.vocab);
}

//! Patch embedding, a p x p x 3 -> h linear per token: `2 N 3 p^2 h`.
[[nodiscard]] constexpr double patch_embedding_forward_flops(const vit_spec& vit,
                                                             const microbatch_shape& shape) noexcept {
  return 2 * shape.tokens * 3 * static_cast<double>(vit.patch_size * vit.patch_size) * static_cast<double>(vit.hidden);
}

//! Projector (2-layer MLP on every encoder token): `2 N (h_enc h_llm + h_llm^2)`.
[[nodiscard]] constexpr double projector_forward_flops(const projector_spec& projector,
                                                       const microbatch_shape& shape) noexcept {
  return 2 * shape.tokens * static_cast<double>(projector.parameters());
}

//! Forward FLOPs of one part of `model` for a microbatch of `shape` in that part's
//! module. The LLM's token embedding is a lookup: 0 FLOPs.
[[nodiscard]] constexpr double part_forward_flops(const multimodal_spec& model, module_piece piece,
                                                  const microbatch_shape& shape) noexcept {
  if (piece.kind == module_kind::encoder) {
    switch (piece.part) {
      case module_part::layer: return layer_forward_flops(model.encoder, shape);
      case module_part::embedding: return patch_embedding_forward_flops(model.encoder, shape);
      case module_part::head: return projector_forward_flops(model.projector, shape);
    }
  } else {
    switch (piece.part) {
      case module_part::layer: return layer_forward_flops(model.llm, shape);
      case module_part::embedding: return 0.0;
      case module_part::head: return lm_head_forward_flops(model.llm, shape);
    }
  }
  return 0.0;
}

//! Backward FLOPs per forward FLOP: 2 (input and weight gradients), 3 when the
//! forward is recomputed first. Training = forward x (1 + this): 3x, or 4x = 3x * 4/3.
[[nodiscard]] constexpr double backward_flops_ratio(bool recompute_activations) noexcept {
  return recompute_activations ? 3.0 : 2.0;
}

}  // namespace dflop
