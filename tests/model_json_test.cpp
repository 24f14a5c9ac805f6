// SPDX-License-Identifier: Apache-2.0
#include "error_of.hpp"

#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

namespace {

const char* const custom_model = R"({
  "name": "tiny",
  "encoder": {"name": "vit-s", "layers": 4, "hidden": 256, "ffn": 1024, "heads": 4,
              "image_size": 224, "patch_size": 16},
  "llm": {"name": "lm-s", "layers": 6, "hidden": 512, "ffn": 1536, "heads": 8, "kv_heads": 2,
          "vocab": 32000, "tied_embeddings": true}
})";
}  // namespace

TEST_CASE("a model file with inline shapes loads", "[model][json]") {
  const auto model = dflop::parse_model_json(custom_model, "tiny.json");
  CHECK(model.name == "tiny");
  CHECK(model.encoder == dflop::vit_spec{"vit-s", 4, 256, 1024, 4, 4, 224, 16});  // kv_heads defaults to heads
  CHECK(model.llm == dflop::llm_spec{"lm-s", 6, 512, 1536, 8, 2, 32000, true});
  CHECK(model.projector == dflop::projector_spec{256, 512});
}

TEST_CASE("a model file may name presets and defaults its name", "[model][json]") {
  const auto model = dflop::parse_model_json(R"({"encoder": "siglip-400m", "llm": "qwen2.5-7b"})");
  CHECK(model == dflop::find_model("siglip-400m+qwen2.5-7b"));
  CHECK_THAT(dflop::test::error_of([] { (void)dflop::parse_model_json(R"({"encoder": "siglip", "llm": "qwen2.5-7b"})", "m.json"); }),
             Catch::StartsWith("m.json: unknown encoder 'siglip' (known: siglip-400m"));
}

TEST_CASE("model and GPU files load from disk; load_model picks file or preset", "[model][json]") {
  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/model_json_test_tiny.json";
  std::ofstream(path) << custom_model;
  CHECK(dflop::load_model(path).name == "tiny");
  CHECK(dflop::load_model("internvit-300m+llama3-8b").llm.name == "llama3-8b");
  const std::string gpu_path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/model_json_test_gpu.json";
  std::ofstream(gpu_path) << R"({"name": "x1", "peak_tflops": 100, "memory_gib": 24,
    "intra_node_gb_per_s": 64, "inter_node_gb_per_s": 12.5, "latency_us": 8})";
  const auto gpu = dflop::load_gpu(gpu_path);
  CHECK(gpu == dflop::gpu_spec{"x1", 100e12, 24LL << 30, 64e9, 12.5e9, 8e-6});
  CHECK(dflop::load_gpu("h100-80gb") == dflop::find_gpu("h100-80gb"));
  CHECK(dflop::test::error_of([] { (void)dflop::load_model("/nonexistent/m.json"); }) ==
        "/nonexistent/m.json: cannot open file for reading");
}

TEST_CASE("malformed model JSON names the line or the field and the reason", "[model][json]") {
  auto model_error = [](const char* text) { return dflop::test::error_of([&] { (void)dflop::parse_model_json(text, "m.json"); }); };
  // Syntax error on line 3 (the missing comma).
  CHECK_THAT(model_error("{\n  \"encoder\": \"siglip-400m\"\n  \"llm\": \"qwen2.5-7b\"\n}"),
             Catch::StartsWith("m.json:3: invalid JSON:"));
  CHECK(model_error(R"({"encoder": "siglip-400m"})") == "m.json: field 'llm': missing required field");
  CHECK(model_error(R"([1, 2])") == "m.json: field 'top level': expected a JSON object");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": "qwen2.5-7b", "lmm": 1})") ==
        "m.json: field 'lmm': unknown field (expected one of: name, encoder, llm)");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": {"name": "x", "layers": 2, "hidden": "big", "ffn": 8,
        "heads": 2, "kv_heads": 1, "vocab": 10}})") ==
        "m.json: field 'llm.hidden': expected a positive integer, got \"big\"");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": {"name": "x", "layers": -2, "hidden": 8, "ffn": 8,
        "heads": 2, "kv_heads": 1, "vocab": 10}})") ==
        "m.json: field 'llm.layers': expected a positive integer, got -2");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": {"name": "x", "layers": 2, "hidden": 8.5, "ffn": 8,
        "heads": 2, "kv_heads": 1, "vocab": 10}})") ==
        "m.json: field 'llm.hidden': expected a positive integer, got 8.5");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": {"name": "x", "layers": 2, "hidden": 8, "ffn": 8,
        "heads": 3, "kv_heads": 1, "vocab": 10}})") == "m.json: llm: field 'heads' must divide 'hidden'");
  CHECK(model_error(R"({"encoder": {"name": "v", "layers": 2, "hidden": 8, "ffn": 8, "heads": 2,
        "image_size": 10, "patch_size": 14}, "llm": "qwen2.5-7b"})") ==
        "m.json: encoder: field 'patch_size' exceeds 'image_size'");
  CHECK(model_error(R"({"encoder": {"name": "v", "layers": 2, "hidden": 8, "ffn": 8, "heads": 2,
        "image_size": 28, "patch_size": 14, "dropout": 0.1}, "llm": "qwen2.5-7b"})") ==
        "m.json: field 'encoder.dropout': unknown field (expected one of: name, layers, hidden, ffn, heads, "
        "kv_heads, image_size, patch_size)");
  CHECK(model_error(R"({"encoder": "siglip-400m", "llm": {"name": "x", "layers": 2, "hidden": 8, "ffn": 8,
        "heads": 2, "kv_heads": 1, "vocab": 10, "tied_embeddings": "yes"}})") ==
        "m.json: field 'llm.tied_embeddings': expected true or false, got \"yes\"");
}

TEST_CASE("malformed GPU JSON names the field and the reason", "[gpu][model][json]") {
  auto gpu_error = [](const char* text) { return dflop::test::error_of([&] { (void)dflop::parse_gpu_json(text, "g.json"); }); };
  CHECK(gpu_error(R"({"name": "x", "peak_tflops": 100, "memory_gib": 24, "intra_node_gb_per_s": 64,
                      "inter_node_gb_per_s": 0, "latency_us": 8})") ==
        "g.json: field 'inter_node_gb_per_s': expected a positive number, got 0");
  CHECK(gpu_error(R"({"name": "x", "peak_tflops": 100, "memory_gib": 24, "intra_node_gb_per_s": 64,
                      "inter_node_gb_per_s": 10})") == "g.json: field 'latency_us': missing required field");
  CHECK(gpu_error(R"({"name": 7})") == "g.json: field 'name': expected a string, got 7");
  CHECK_THAT(gpu_error("{\"name\": \"x\",\n\n  \"peak_tflops\": }"), Catch::StartsWith("g.json:3: invalid JSON:"));
}

TEST_CASE("models and GPUs written as JSON read back equal (every preset)", "[model][gpu][json]") {
  for (const auto& gpu : dflop::gpu_presets()) {
    INFO(gpu.name);
    CHECK(dflop::gpu_from_json(dflop::to_json(gpu), "g.json") == gpu);
  }
  for (const char* name : {"siglip-400m+qwen2.5-7b", "internvit-6b+llama3-70b", "internvit-300m+qwen2.5-72b"}) {
    INFO(name);
    const auto model = dflop::find_model(name);
    const auto written = dflop::to_json(model);
    CHECK(written["encoder"].is_object());  // shapes spelled out, not preset names
    CHECK(dflop::model_from_json(written, "m.json") == model);
  }
}
