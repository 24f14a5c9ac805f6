// SPDX-License-Identifier: Apache-2.0
//! \file
//! Shape of a decoder LLM (GQA attention, gated MLP, vocabulary): what its
//! FLOPs, parameters and activations follow from.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace dflop {

//! A decoder-only LLM with grouped-query attention and a gated (SwiGLU) MLP.
struct llm_spec {
  std::string name;                //!< preset or file name, e.g. "qwen2.5-7b"
  std::int64_t layers = 0;         //!< decoder layers
  std::int64_t hidden = 0;         //!< hidden size h
  std::int64_t ffn = 0;            //!< MLP inner size f (each of gate and up)
  std::int64_t heads = 0;          //!< query heads a
  std::int64_t kv_heads = 0;       //!< key/value heads g (GQA; g = a is plain MHA)
  std::int64_t vocab = 0;          //!< vocabulary size V
  bool tied_embeddings = false;    //!< LM head shares the token-embedding matrix

  //! Weights of one layer: Q and O h^2 each, K and V h^2 g/a each, gate/up/down 3 h f.
  //! Biases (Qwen2.5's QKV bias) and norm vectors (< 0.01%) are not counted.
  [[nodiscard]] constexpr std::int64_t layer_parameters() const noexcept {
    return 2 * hidden * hidden + 2 * hidden * (hidden / heads) * kv_heads + 3 * hidden * ffn;
  }

  //! Weights of the token embedding: V h.
  [[nodiscard]] constexpr std::int64_t embedding_parameters() const noexcept { return vocab * hidden; }

  //! Weights of the LM head: V h (a stage holding the head keeps its own copy even when tied,
  //! as pipeline-parallel trainers do when embedding and head sit on different stages).
  [[nodiscard]] constexpr std::int64_t head_parameters() const noexcept { return vocab * hidden; }

  //! Every weight of the model (a tied head counted once).
  [[nodiscard]] constexpr std::int64_t total_parameters() const noexcept {
    return layers * layer_parameters() + embedding_parameters() + (tied_embeddings ? 0 : head_parameters());
  }

  friend bool operator==(const llm_spec&, const llm_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const llm_spec& spec) {
  return out << "llm_spec{name=" << spec.name << ", layers=" << spec.layers << ", hidden=" << spec.hidden
             << ", ffn=" << spec.ffn << ", heads=" << spec.heads << ", kv_heads=" << spec.kv_heads
             << ", vocab=" << spec.vocab << ", tied_embeddings=" << (spec.tied_embeddings ? "true" : "false")
             << "}";
}

}  // namespace dflop
