// SPDX-License-Identifier: Apache-2.0
//! \file
//! The two modules of a multimodal LLM: the modality encoder (with its
//! projector) and the decoder LLM. Cost and memory models are asked per module.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace dflop {

//! Which module of a multimodal model a cost or memory question is about.
enum class module_kind : std::uint8_t {
  encoder,  //!< the ViT (patch embedding, layers, projector)
  llm,      //!< the decoder LLM (token embedding, layers, LM head)
};

//! Both modules, encoder first (the order they run in the pipeline).
inline constexpr std::array<module_kind, 2> all_module_kinds{module_kind::encoder, module_kind::llm};

//! The spelling used in files and tables: "encoder" or "llm".
[[nodiscard]] constexpr std::string_view to_string(module_kind kind) noexcept {
  return kind == module_kind::encoder ? "encoder" : "llm";
}

//! Parses "encoder" or "llm"; nullopt for anything else.
[[nodiscard]] constexpr std::optional<module_kind> parse_module_kind(std::string_view text) noexcept {
  for (module_kind kind : all_module_kinds)
    if (to_string(kind) == text) return kind;
  return std::nullopt;
}

inline std::ostream& operator<<(std::ostream& out, module_kind kind) { return out << to_string(kind); }

//! The pieces of a module a pipeline stage can hold: its repeated layers, the
//! part before the first layer and the part after the last one.
enum class module_part : std::uint8_t {
  layer,      //!< one transformer layer (all layers of a module are alike)
  embedding,  //!< before layer 0: patch embedding (encoder) or token embedding (LLM)
  head,       //!< after the last layer: projector (encoder) or final norm + LM head + loss (LLM)
};

//! Every part, in pipeline order of first appearance.
inline constexpr std::array<module_part, 3> all_module_parts{module_part::embedding, module_part::layer,
                                                            module_part::head};

//! The name of one part of one module, as profile tables spell it:
//! encoder: "encoder", "encoder_embedding", "projector"; llm: "llm", "llm_embedding", "lm_head".
[[nodiscard]] constexpr std::string_view part_name(module_kind kind, module_part part) noexcept {
  if (kind == module_kind::encoder) {
    switch (part) {
      case module_part::layer: return "encoder";
      case module_part::embedding: return "encoder_embedding";
      case module_part::head: return "projector";
    }
  } else {
    switch (part) {
      case module_part::layer: return "llm";
      case module_part::embedding: return "llm_embedding";
      case module_part::head: return "lm_head";
    }
  }
  return "unknown";
}

//! A module and one of its parts.
struct module_piece {
  module_kind kind = module_kind::llm;     //!< which module
  module_part part = module_part::layer;   //!< which part of it
  friend bool operator==(const module_piece&, const module_piece&) = default;
};

//! Parses a profile-table part name (see `part_name`); nullopt for anything else.
[[nodiscard]] constexpr std::optional<module_piece> parse_part_name(std::string_view text) noexcept {
  for (module_kind kind : all_module_kinds)
    for (module_part part : all_module_parts)
      if (part_name(kind, part) == text) return module_piece{kind, part};
  return std::nullopt;
}

inline std::ostream& operator<<(std::ostream& out, module_piece piece) {
  return out << part_name(piece.kind, piece.part);
}

}  // namespace dflop
