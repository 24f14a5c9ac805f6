// SPDX-License-Identifier: Apache-2.0
//! \file
//! Multimodal models from JSON files (schema in docs/model-json.md).
//!
//! ```json
//! {
//!   "name": "my-mllm",                  // optional; default "ENCODER+LLM"
//!   "encoder": "siglip-400m",           // a preset name, or an object:
//!   //  {"name": "my-vit", "layers": 27, "hidden": 1152, "ffn": 4304, "heads": 16,
//!   //   "kv_heads": 16 (optional, default heads), "image_size": 384, "patch_size": 14}
//!   "llm": "qwen2.5-7b"                 // a preset name, or an object:
//!   //  {"name": "my-llm", "layers": 28, "hidden": 3584, "ffn": 18944, "heads": 28,
//!   //   "kv_heads": 4, "vocab": 152064, "tied_embeddings": false (optional)}
//! }
//! ```
//! Sizes are positive integers; unknown fields are errors. Errors are
//! `input_error(file, line, reason)`: the line of a JSON syntax error, or 0 with
//! the field path (e.g. "field 'llm.hidden': ...") for a bad field.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/detail/json_fields.hpp>
#include <dflop/model/multimodal_spec.hpp>
#include <dflop/model/presets.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace dflop {

namespace detail {

inline vit_spec encoder_from_json(const nlohmann::json& value, const std::string& source) {
  if (value.is_string()) return find_encoder(value.get<std::string>(), source);
  const json_fields fields(value, source, "encoder");
  fields.only({"name", "layers", "hidden", "ffn", "heads", "kv_heads", "image_size", "patch_size"});
  vit_spec spec;
  spec.name = fields.text("name");
  spec.layers = fields.positive_integer("layers");
  spec.hidden = fields.positive_integer("hidden");
  spec.ffn = fields.positive_integer("ffn");
  spec.heads = fields.positive_integer("heads");
  spec.kv_heads = fields.has("kv_heads") ? fields.positive_integer("kv_heads") : spec.heads;
  spec.image_size = fields.positive_integer("image_size");
  spec.patch_size = fields.positive_integer("patch_size");
  if (auto reason = find_inconsistency(spec)) throw input_error(source, 0, "encoder: " + *reason);
  return spec;
}

inline llm_spec llm_from_json(const nlohmann::json& value, const std::string& source) {
  if (value.is_string()) return find_llm(value.get<std::string>(), source);
  const json_fields fields(value, source, "llm");
  fields.only({"name", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "tied_embeddings"});
  llm_spec spec;
  spec.name = fields.text("name");
  spec.layers = fields.positive_integer("layers");
  spec.hidden = fields.positive_integer("hidden");
  spec.ffn = fields.positive_integer("ffn");
  spec.heads = fields.positive_integer("heads");
  spec.kv_heads = fields.positive_integer("kv_heads");
  spec.vocab = fields.positive_integer("vocab");
  spec.tied_embeddings = fields.boolean("tied_embeddings", false);
  if (auto reason = find_inconsistency(spec)) throw input_error(source, 0, "llm: " + *reason);
  return spec;
}

}  // namespace detail

//! A model from parsed JSON (schema above); `source` names the file in errors.
[[nodiscard]] inline multimodal_spec model_from_json(const nlohmann::json& document, const std::string& source) {
  const detail::json_fields fields(document, source, "");
  fields.only({"name", "encoder", "llm"});
  auto encoder = detail::encoder_from_json(fields.at("encoder"), source);
  auto llm = detail::llm_from_json(fields.at("llm"), source);
  return combine(std::move(encoder), std::move(llm), fields.has("name") ? fields.text("name") : std::string{});
}

//! `spec` in the model-file format with both shapes spelled out (never preset
//! names), so a file that embeds it is self-contained and `model_from_json`
//! reads it back (the projector is derived from the hidden sizes, as always).
[[nodiscard]] inline nlohmann::ordered_json to_json(const multimodal_spec& spec) {
  const vit_spec& e = spec.encoder;
  const llm_spec& l = spec.llm;
  return {{"name", spec.name},
          {"encoder",
           {{"name", e.name}, {"layers", e.layers}, {"hidden", e.hidden}, {"ffn", e.ffn}, {"heads", e.heads},
            {"kv_heads", e.kv_heads}, {"image_size", e.image_size}, {"patch_size", e.patch_size}}},
          {"llm",
           {{"name", l.name}, {"layers", l.layers}, {"hidden", l.hidden}, {"ffn", l.ffn}, {"heads", l.heads},
            {"kv_heads", l.kv_heads}, {"vocab", l.vocab}, {"tied_embeddings", l.tied_embeddings}}}};
}

//! A model from JSON text.
[[nodiscard]] inline multimodal_spec parse_model_json(std::string_view text, const std::string& source = "<text>") {
  return model_from_json(detail::parse_json_text(text, source), source);
}

//! A model from a JSON file.
[[nodiscard]] inline multimodal_spec load_model_file(const std::string& path) {
  return parse_model_json(detail::read_text_file(path), path);
}

//! What a `--model` argument names: a JSON file when it ends in ".json", else a
//! preset "ENCODER+LLM".
[[nodiscard]] inline multimodal_spec load_model(const std::string& name_or_path, const std::string& source = "model") {
  return detail::names_json_file(name_or_path) ? load_model_file(name_or_path) : find_model(name_or_path, source);
}

}  // namespace dflop
