// SPDX-License-Identifier: Apache-2.0
//! \file
//! GPU specs from JSON files (schema in docs/model-json.md):
//!
//! ```json
//! {"name": "my-gpu", "peak_tflops": 989, "memory_gib": 80,
//!  "intra_node_gb_per_s": 450, "inter_node_gb_per_s": 50, "latency_us": 5}
//! ```
//! Every field is required and positive; GB = 1e9 bytes, GiB = 2^30 bytes,
//! bandwidths per direction. Unknown fields are errors.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/detail/json_fields.hpp>
#include <dflop/model/gpu_spec.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace dflop {

//! A GPU from parsed JSON (schema above); `source` names the file in errors.
[[nodiscard]] inline gpu_spec gpu_from_json(const nlohmann::json& document, const std::string& source) {
  const detail::json_fields fields(document, source, "");
  fields.only({"name", "peak_tflops", "memory_gib", "intra_node_gb_per_s", "inter_node_gb_per_s", "latency_us"});
  gpu_spec spec;
  spec.name = fields.text("name");
  spec.peak_flops = fields.positive_number("peak_tflops") * 1e12;
  const double memory_gib = fields.positive_number("memory_gib");
  if (memory_gib > 1e9) fields.fail("memory_gib", "implausibly large (" + std::to_string(memory_gib) + " GiB)");
  spec.memory_bytes = static_cast<std::int64_t>(std::llround(memory_gib * 1073741824.0));
  spec.intra_node_bandwidth = fields.positive_number("intra_node_gb_per_s") * 1e9;
  spec.inter_node_bandwidth = fields.positive_number("inter_node_gb_per_s") * 1e9;
  spec.latency = fields.positive_number("latency_us") / 1e6;  // 8 / 1e6 is the double 8e-6; 8 * 1e-6 is not
  return spec;
}

//! `spec` in the GPU-file format (plan files embed it), so `gpu_from_json` reads
//! it back: units are converted by exact powers of ten.
[[nodiscard]] inline nlohmann::ordered_json to_json(const gpu_spec& spec) {
  return {{"name", spec.name},
          {"peak_tflops", spec.peak_flops / 1e12},
          {"memory_gib", static_cast<double>(spec.memory_bytes) / 1073741824.0},
          {"intra_node_gb_per_s", spec.intra_node_bandwidth / 1e9},
          {"inter_node_gb_per_s", spec.inter_node_bandwidth / 1e9},
          {"latency_us", spec.latency * 1e6}};
}

//! A GPU from JSON text.
[[nodiscard]] inline gpu_spec parse_gpu_json(std::string_view text, const std::string& source = "<text>") {
  return gpu_from_json(detail::parse_json_text(text, source), source);
}

//! A GPU from a JSON file.
[[nodiscard]] inline gpu_spec load_gpu_file(const std::string& path) {
  return parse_gpu_json(detail::read_text_file(path), path);
}

//! What a `--gpu` argument names: a JSON file when it ends in ".json", else a preset.
[[nodiscard]] inline gpu_spec load_gpu(const std::string& name_or_path, const std::string& source = "gpu") {
  return detail::names_json_file(name_or_path) ? load_gpu_file(name_or_path) : find_gpu(name_or_path, source);
}

}  // namespace dflop
