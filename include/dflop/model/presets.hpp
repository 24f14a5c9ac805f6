// SPDX-License-Identifier: Apache-2.0
//! \file
//! Built-in model shapes (public configurations, REFERENCE.md section 5) and
//! lookup by name: `find_encoder`, `find_llm`, and `find_model("ENCODER+LLM")`.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/multimodal_spec.hpp>

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! Every built-in encoder: SigLIP-400M at 384 px and InternViT-300M/6B at 448 px, patch 14.
[[nodiscard]] inline const std::vector<vit_spec>& encoder_presets() {
  static const std::vector<vit_spec> presets{
      {"siglip-400m", 27, 1152, 4304, 16, 16, 384, 14},
      {"internvit-300m", 24, 1024, 4096, 16, 16, 448, 14},
      {"internvit-6b", 45, 3200, 12800, 25, 25, 448, 14},
  };
  return presets;
}

//! Every built-in LLM: Qwen2.5 7B/32B/72B and Llama3 8B/70B (untied embeddings).
[[nodiscard]] inline const std::vector<llm_spec>& llm_presets() {
  static const std::vector<llm_spec> presets{
      {"qwen2.5-7b", 28, 3584, 18944, 28, 4, 152064, false},
      {"qwen2.5-32b", 64, 5120, 27648, 40, 8, 152064, false},
      {"qwen2.5-72b", 80, 8192, 29568, 64, 8, 152064, false},
      {"llama3-8b", 32, 4096, 14336, 32, 8, 128256, false},
      {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, false},
  };
  return presets;
}

namespace detail {

template <class Spec>
[[nodiscard]] std::string list_names(const std::vector<Spec>& specs) {
  std::string names;
  for (const auto& spec : specs) {
    if (!names.empty()) names.append(", ");
    names.append(spec.name);
  }
  return names;
}

template <class Spec>
[[nodiscard]] Spec find_named(const std::vector<Spec>& specs, std::string_view name, std::string_view what,
                              const std::string& source) {
  for (const auto& spec : specs)
    if (spec.name == name) return spec;
  std::string reason;
  reason.append("unknown ").append(what).append(" '").append(name).append("' (known: ").append(list_names(specs)).append(")");
  throw input_error(source, 0, reason);
}

}  // namespace detail

//! The built-in encoder called `name`; `input_error` listing the known names otherwise.
//! \param source what to name in the error (a flag or file)
[[nodiscard]] inline vit_spec find_encoder(std::string_view name, const std::string& source = "model") {
  return detail::find_named(encoder_presets(), name, "encoder", source);
}

//! The built-in LLM called `name`; `input_error` listing the known names otherwise.
[[nodiscard]] inline llm_spec find_llm(std::string_view name, const std::string& source = "model") {
  return detail::find_named(llm_presets(), name, "LLM", source);
}

//! The multimodal model named "ENCODER+LLM" from built-in parts, e.g.
//! "siglip-400m+qwen2.5-7b"; `input_error` naming the bad part and the known names.
[[nodiscard]] inline multimodal_spec find_model(std::string_view name, const std::string& source = "model") {
  const auto plus = name.find('+');
  if (plus == std::string_view::npos || name.find('+', plus + 1) != std::string_view::npos) {
    std::string reason;
    reason.append("model name '").append(name).append("' is not ENCODER+LLM (encoders: ")
        .append(detail::list_names(encoder_presets())).append("; LLMs: ").append(detail::list_names(llm_presets()))
        .append(")");
    throw input_error(source, 0, reason);
  }
  return combine(find_encoder(name.substr(0, plus), source), find_llm(name.substr(plus + 1), source));
}

}  // namespace dflop
