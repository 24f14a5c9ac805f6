// SPDX-License-Identifier: Apache-2.0
//! \file
//! One training sample as the planner sees it: its modality and the sizes that
//! decide what it costs in the encoder and in the LLM.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace dflop {

//! What a sample carries besides text; decides what its encoder items are.
enum class modality : std::uint8_t {
  text,         //!< text only: no encoder work
  image,        //!< one image, possibly tiled (AnyRes): items are tiles
  multi_image,  //!< several images, one tile each: items are images
  video,        //!< frames: items are frames
  audio,        //!< audio chunks: items are chunks
};

//! Every modality, in declaration order (for tables and loops).
inline constexpr std::array<modality, 5> all_modalities{modality::text, modality::image, modality::multi_image,
                                                       modality::video, modality::audio};

//! The trace spelling of a modality: "text", "image", "multi_image", "video", "audio".
[[nodiscard]] constexpr std::string_view to_string(modality kind) noexcept {
  switch (kind) {
    case modality::text: return "text";
    case modality::image: return "image";
    case modality::multi_image: return "multi_image";
    case modality::video: return "video";
    case modality::audio: return "audio";
  }
  return "unknown";
}

//! Parses the trace spelling; nullopt for anything else.
[[nodiscard]] constexpr std::optional<modality> parse_modality(std::string_view text) noexcept {
  for (modality kind : all_modalities)
    if (to_string(kind) == text) return kind;
  return std::nullopt;
}

inline std::ostream& operator<<(std::ostream& out, modality kind) { return out << to_string(kind); }

//! One training sample. Counts are what the cost models read:
//! `encoder_items` tiles/images/frames/chunks, `encoder_tokens` the tokens the
//! encoder runs over (all items together), `llm_tokens` the length of the
//! sample's packed LLM sequence including the image/video tokens.
struct sample {
  std::string id;                   //!< unique within a workload
  modality kind = modality::text;   //!< what it carries
  std::int64_t encoder_items = 0;   //!< tiles, images, frames or audio chunks
  std::int64_t encoder_tokens = 0;  //!< encoder tokens over all items
  std::int64_t llm_tokens = 0;      //!< packed LLM sequence length

  friend bool operator==(const sample&, const sample&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const sample& s) {
  return out << "sample{id=" << s.id << ", modality=" << s.kind << ", encoder_items=" << s.encoder_items
             << ", encoder_tokens=" << s.encoder_tokens << ", llm_tokens=" << s.llm_tokens << "}";
}

//! Largest count a sample may have: 2^53, the last integer a double holds
//! exactly, so every count converts exactly where shapes and costs are priced
//! (in doubles), and integer sums over a batch of up to 1024 such samples fit in 64 bits.
inline constexpr std::int64_t max_sample_count = std::int64_t{1} << 53;

//! Why a sample is not self-consistent, or nullopt when it is. The rules:
//! counts are non-negative; an LLM sequence has at least one token; a text
//! sample has no encoder items or tokens; any other modality has at least one
//! item, and items and tokens are both zero or both positive, with at least one
//! encoder token per item; no count exceeds `max_sample_count`.
[[nodiscard]] inline std::optional<std::string> find_inconsistency(const sample& s) {
  if (s.id.empty()) return "empty id";
  if (s.encoder_items < 0) return "negative encoder_items (" + std::to_string(s.encoder_items) + ")";
  if (s.encoder_tokens < 0) return "negative encoder_tokens (" + std::to_string(s.encoder_tokens) + ")";
  if (s.llm_tokens < 0) return "negative llm_tokens (" + std::to_string(s.llm_tokens) + ")";
  if (s.llm_tokens == 0) return "llm_tokens is 0: every sample has at least one LLM token";
  for (const auto& [name, count] : {std::pair{"encoder_items", s.encoder_items},
                                    std::pair{"encoder_tokens", s.encoder_tokens}, std::pair{"llm_tokens", s.llm_tokens}})
    if (count > max_sample_count)
      return std::string(name) + " (" + std::to_string(count) + ") exceeds " + std::to_string(max_sample_count) +
             " (2^53), the largest count dflop prices exactly";
  if (s.kind == modality::text) {
    if (s.encoder_items != 0 || s.encoder_tokens != 0)
      return "a text sample has encoder_items " + std::to_string(s.encoder_items) + " and encoder_tokens " +
             std::to_string(s.encoder_tokens) + "; both must be 0";
    return std::nullopt;
  }
  if (s.encoder_items == 0)
    return "a " + std::string(to_string(s.kind)) + " sample needs at least one encoder item";
  if (s.encoder_tokens < s.encoder_items)
    return "encoder_tokens (" + std::to_string(s.encoder_tokens) + ") is less than encoder_items (" +
           std::to_string(s.encoder_items) + "): every item has at least one token";
  return std::nullopt;
}

}  // namespace dflop
