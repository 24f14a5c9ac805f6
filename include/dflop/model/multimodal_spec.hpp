// SPDX-License-Identifier: Apache-2.0
//! \file
//! A multimodal model: ViT encoder, projector, decoder LLM. Named `ENCODER+LLM`.
#pragma once

#include <dflop/model/llm_spec.hpp>
#include <dflop/model/vit_spec.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace dflop {

//! The projector between encoder and LLM: a 2-layer MLP (LLaVA's "mlp2x_gelu")
//! `Linear(input_hidden -> output_hidden), GELU, Linear(output_hidden -> output_hidden)`,
//! applied to every encoder output token.
struct projector_spec {
  std::int64_t input_hidden = 0;   //!< the encoder's hidden size
  std::int64_t output_hidden = 0;  //!< the LLM's hidden size

  //! Weights: input x output + output x output (biases not counted).
  [[nodiscard]] constexpr std::int64_t parameters() const noexcept {
    return input_hidden * output_hidden + output_hidden * output_hidden;
  }

  friend bool operator==(const projector_spec&, const projector_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const projector_spec& spec) {
  return out << "projector_spec{input_hidden=" << spec.input_hidden << ", output_hidden=" << spec.output_hidden
             << "}";
}

//! An encoder + projector + LLM model. The projector belongs to the encoder
//! module (it runs on the encoder's last pipeline stage).
struct multimodal_spec {
  std::string name;          //!< "ENCODER+LLM" for presets, or the file's "name"
  vit_spec encoder;          //!< the modality encoder
  projector_spec projector;  //!< encoder hidden -> LLM hidden
  llm_spec llm;              //!< the decoder LLM

  friend bool operator==(const multimodal_spec&, const multimodal_spec&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const multimodal_spec& spec) {
  return out << "multimodal_spec{name=" << spec.name << ", encoder=" << spec.encoder
             << ", projector=" << spec.projector << ", llm=" << spec.llm << "}";
}

//! Joins an encoder and an LLM with the projector between their hidden sizes,
//! named "ENCODER+LLM" unless `name` is given.
[[nodiscard]] inline multimodal_spec combine(vit_spec encoder, llm_spec llm, std::string name = {}) {
  multimodal_spec spec;
  if (name.empty()) {
    name.append(encoder.name).append("+").append(llm.name);
  }
  spec.name = std::move(name);
  spec.projector = projector_spec{encoder.hidden, llm.hidden};
  spec.encoder = std::move(encoder);
  spec.llm = std::move(llm);
  return spec;
}

//! Why an encoder shape is unusable (field named), or nullopt when it is fine:
//! every size positive, heads divide hidden, kv_heads divide heads, patch <= image.
[[nodiscard]] inline std::optional<std::string> find_inconsistency(const vit_spec& spec) {
  auto positive = [](const char* field, std::int64_t value) -> std::optional<std::string> {
    if (value > 0) return std::nullopt;
    return std::string("field '") + field + "' must be a positive integer, got " + std::to_string(value);
  };
  for (auto reason : {positive("layers", spec.layers), positive("hidden", spec.hidden), positive("ffn", spec.ffn),
                      positive("heads", spec.heads), positive("kv_heads", spec.kv_heads),
                      positive("image_size", spec.image_size), positive("patch_size", spec.patch_size)})
    if (reason) return reason;
  if (spec.hidden % spec.heads != 0) return "field 'heads' must divide 'hidden'";
  if (spec.heads % spec.kv_heads != 0) return "field 'kv_heads' must divide 'heads'";
  if (spec.patch_size > spec.image_size) return "field 'patch_size' exceeds 'image_size'";
  return std::nullopt;
}

//! Why an LLM shape is unusable (field named), or nullopt when it is fine:
//! every size positive, heads divide hidden, kv_heads divide heads.
[[nodiscard]] inline std::optional<std::string> find_inconsistency(const llm_spec& spec) {
  auto positive = [](const char* field, std::int64_t value) -> std::optional<std::string> {
    if (value > 0) return std::nullopt;
    return std::string("field '") + field + "' must be a positive integer, got " + std::to_string(value);
  };
  for (auto reason : {positive("layers", spec.layers), positive("hidden", spec.hidden), positive("ffn", spec.ffn),
                      positive("heads", spec.heads), positive("kv_heads", spec.kv_heads),
                      positive("vocab", spec.vocab)})
    if (reason) return reason;
  if (spec.hidden % spec.heads != 0) return "field 'heads' must divide 'hidden'";
  if (spec.heads % spec.kv_heads != 0) return "field 'kv_heads' must divide 'heads'";
  return std::nullopt;
}

}  // namespace dflop
