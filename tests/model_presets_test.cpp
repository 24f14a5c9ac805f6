// SPDX-License-Identifier: Apache-2.0
#include "error_of.hpp"

#include <dflop/model/gpu_spec.hpp>
#include <dflop/model/presets.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

TEST_CASE("encoder and LLM presets carry the public shapes", "[model]") {
  const auto siglip = dflop::find_encoder("siglip-400m");
  CHECK(siglip == dflop::vit_spec{"siglip-400m", 27, 1152, 4304, 16, 16, 384, 14});
  CHECK(siglip.tokens_per_item() == 729);  // floor(384 / 14) = 27, 27^2
  CHECK(dflop::find_encoder("internvit-300m") == dflop::vit_spec{"internvit-300m", 24, 1024, 4096, 16, 16, 448, 14});
  CHECK(dflop::find_encoder("internvit-6b") == dflop::vit_spec{"internvit-6b", 45, 3200, 12800, 25, 25, 448, 14});
  CHECK(dflop::find_encoder("internvit-6b").tokens_per_item() == 1024);

  CHECK(dflop::find_llm("qwen2.5-7b") == dflop::llm_spec{"qwen2.5-7b", 28, 3584, 18944, 28, 4, 152064, false});
  CHECK(dflop::find_llm("qwen2.5-32b") == dflop::llm_spec{"qwen2.5-32b", 64, 5120, 27648, 40, 8, 152064, false});
  CHECK(dflop::find_llm("qwen2.5-72b") == dflop::llm_spec{"qwen2.5-72b", 80, 8192, 29568, 64, 8, 152064, false});
  CHECK(dflop::find_llm("llama3-8b") == dflop::llm_spec{"llama3-8b", 32, 4096, 14336, 32, 8, 128256, false});
  CHECK(dflop::find_llm("llama3-70b") == dflop::llm_spec{"llama3-70b", 80, 8192, 28672, 64, 8, 128256, false});
  for (const auto& spec : dflop::encoder_presets()) CHECK_FALSE(dflop::find_inconsistency(spec).has_value());
  for (const auto& spec : dflop::llm_presets()) CHECK_FALSE(dflop::find_inconsistency(spec).has_value());
}

TEST_CASE("parameter counts match the published model sizes", "[model]") {
  // Qwen2.5-7B layer: Q,O 2 h^2 = 25,690,112; K,V 2 h (h/a) g = 2*3584*128*4 = 3,670,016;
  // MLP 3 h f = 3*3584*18944 = 203,685,888; sum 233,046,016. 28 layers = 6,525,288,448,
  // + embedding and untied head 2 * 152064 * 3584 = 1,089,994,752 -> 7,615,283,200 ("7.61B").
  const auto qwen = dflop::find_llm("qwen2.5-7b");
  CHECK(qwen.layer_parameters() == 233'046'016);
  CHECK(qwen.total_parameters() == 7'615'283'200);
  // Llama3-8B: 8.03B with untied head.
  CHECK(dflop::find_llm("llama3-8b").total_parameters() == Approx(8.03e9).epsilon(0.005));
  // SigLIP-400M layers: 27 * (4 h^2 + 2 h f) = 27 * 15,224,832 = 411,070,464.
  CHECK(27 * dflop::find_encoder("siglip-400m").layer_parameters() == 411'070'464);
  auto tied = qwen;
  tied.tied_embeddings = true;
  CHECK(tied.total_parameters() == qwen.total_parameters() - 152064LL * 3584);
}

TEST_CASE("a multimodal model is ENCODER+LLM with a projector between hidden sizes", "[model]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  CHECK(model.name == "siglip-400m+qwen2.5-7b");
  CHECK(model.encoder == dflop::find_encoder("siglip-400m"));
  CHECK(model.llm == dflop::find_llm("qwen2.5-7b"));
  CHECK(model.projector == dflop::projector_spec{1152, 3584});
  CHECK(model.projector.parameters() == 1152LL * 3584 + 3584LL * 3584);
  CHECK(model == dflop::find_model("siglip-400m+qwen2.5-7b"));
  CHECK_FALSE(model == dflop::find_model("siglip-400m+llama3-8b"));
  std::ostringstream text;
  text << model;
  CHECK_THAT(text.str(), Catch::Contains("name=siglip-400m+qwen2.5-7b") && Catch::Contains("hidden=3584") &&
                             Catch::Contains("projector_spec{input_hidden=1152, output_hidden=3584}"));
}

TEST_CASE("unknown model names list the known ones", "[model]") {
  CHECK(dflop::test::error_of([] { (void)dflop::find_model("siglip-400m+gpt-5", "--model"); }) ==
        "--model: unknown LLM 'gpt-5' (known: qwen2.5-7b, qwen2.5-32b, qwen2.5-72b, llama3-8b, llama3-70b)");
  CHECK(dflop::test::error_of([] { (void)dflop::find_model("clip+qwen2.5-7b"); }) ==
        "model: unknown encoder 'clip' (known: siglip-400m, internvit-300m, internvit-6b)");
  CHECK_THAT(dflop::test::error_of([] { (void)dflop::find_model("qwen2.5-7b"); }),
             Catch::Contains("is not ENCODER+LLM") && Catch::Contains("encoders: siglip-400m"));
  CHECK_THAT(dflop::test::error_of([] { (void)dflop::find_model("a+b+c"); }), Catch::Contains("is not ENCODER+LLM"));
}

TEST_CASE("GPU presets carry datasheet figures", "[model]") {
  const auto h100 = dflop::find_gpu("h100-80gb");
  CHECK(h100.peak_flops == 989e12);
  CHECK(h100.memory_bytes == 80LL << 30);
  CHECK(h100.intra_node_bandwidth == 450e9);
  CHECK(h100.inter_node_bandwidth == 50e9);
  CHECK(h100.latency > 0);
  CHECK(dflop::find_gpu("h200-141gb").memory_bytes == 141LL << 30);
  CHECK(dflop::find_gpu("a100-80gb").peak_flops == 312e12);
  CHECK(dflop::find_gpu("a100-80gb").intra_node_bandwidth < h100.intra_node_bandwidth);
  CHECK(dflop::test::error_of([] { (void)dflop::find_gpu("v100", "--gpu"); }) ==
        "--gpu: unknown GPU 'v100' (known: h100-80gb, h200-141gb, a100-80gb)");
  std::ostringstream text;
  text << h100;
  CHECK_THAT(text.str(), Catch::StartsWith("gpu_spec{name=h100-80gb"));
}
