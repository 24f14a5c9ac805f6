// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/analytic_memory_model.hpp>
#include <dflop/model/presets.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <vector>

using dflop::module_kind;
using dflop::modality;
using dflop::sample;

TEST_CASE("the analytic memory model satisfies the concept", "[cost]") {
  STATIC_REQUIRE(dflop::memory_model<dflop::analytic_memory_model>);
}

TEST_CASE("memory of a Qwen2.5-7B first stage matches the hand-computed bytes", "[cost]") {
  // Stage: 14 of 28 layers + token embedding, TP 2, 4 microbatches in flight of one 4096-token sample.
  // Parameters: 14 * 233,046,016 + 152064 * 3584 = 3,262,644,224 + 544,997,376 = 3,807,641,600;
  //   per GPU / 2 = 1,903,820,800.
  //   weights   x 2  =  3,807,641,600 bytes
  //   gradients x 4  =  7,615,283,200 bytes
  //   optimizer x 12 = 22,845,849,600 bytes
  // Activations per token per layer: h (6 + 2 g/a) + 3 f = 21504 + 1024 + 56832 = 79,360 elements
  //   = 158,720 bytes; / TP 2 = 79,360; x 4096 tokens x 14 layers x 4 in flight = 18,203,279,360 bytes.
  const dflop::analytic_memory_model memory(dflop::find_model("siglip-400m+qwen2.5-7b"));
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 4096}};
  const auto bytes = memory.estimate_memory(module_kind::llm, 2, dflop::layer_range(0, 14, 28), 4, microbatch);
  CHECK(bytes == dflop::memory_breakdown{3'807'641'600, 7'615'283'200, 22'845'849'600, 18'203'279'360});
  CHECK(bytes.total() == 52'472'053'760);
  std::ostringstream text;
  text << bytes;
  CHECK_THAT(text.str(), Catch::Contains("activations=18203279360") && Catch::Contains("total=52472053760"));
}

TEST_CASE("recomputation stores layer inputs plus one layer's working set", "[cost]") {
  dflop::memory_options options;
  options.recompute_activations = true;
  const dflop::analytic_memory_model memory(dflop::find_model("siglip-400m+qwen2.5-7b"), options);
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 4096}};
  // Inputs: 3584 x 2 bytes / TP 2 x 4096 x 14 layers x 4 = 822,083,584; working set: 158,720 / 2 x 4096 = 325,058,560.
  const auto bytes = memory.estimate_memory(module_kind::llm, 2, dflop::layer_range(0, 14, 28), 4, microbatch);
  CHECK(bytes.activations == 822'083'584 + 325'058'560);
}

TEST_CASE("the last LLM stage holds the LM head and its logits", "[cost]") {
  const dflop::analytic_memory_model memory(dflop::find_model("siglip-400m+qwen2.5-7b"));
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 1000}};
  const auto with_head = memory.estimate_memory(module_kind::llm, 1, {0, false, true}, 1, microbatch);
  // Head weights V h = 544,997,376; logits and final norm per token: 2 * 2h + 6 V = 14,336 + 912,384.
  CHECK(with_head.parameters == 2 * 544'997'376LL);
  CHECK(with_head.activations == 1000LL * (14'336 + 912'384));
}

TEST_CASE("encoder stages, optimizer sharding and in-flight scaling", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const std::vector<sample> microbatch{{"i", modality::image, 2, 1458, 1460}, {"t", modality::text, 0, 0, 50}};
  const dflop::analytic_memory_model plain(model);
  dflop::memory_options options;
  options.optimizer_shards = 4;
  const dflop::analytic_memory_model sharded(model, options);
  const dflop::stage_slice all{27, true, true};
  const auto a = plain.estimate_memory(module_kind::encoder, 1, all, 1, microbatch);
  const auto b = sharded.estimate_memory(module_kind::encoder, 1, all, 1, microbatch);
  const std::int64_t parameters = 27 * model.encoder.layer_parameters() + model.encoder.embedding_parameters() +
                                  model.projector.parameters();
  CHECK(a.parameters == 2 * parameters);
  CHECK(b.optimizer_states == 12 * parameters / 4);
  CHECK(a.gradients == b.gradients);
  // ViT layer: h (6 + 2) + 2 f = 9216 + 8608 = 17,824 elements; patches 3 * 14^2 * 2 = 1176 bytes;
  // projector (1152 + 2 * 3584) * 2 = 16,640 bytes; per token 27 * 35,648 + 1176 + 16,640 = 980,312.
  CHECK(a.activations == 1458LL * 980'312);
  const auto three = plain.estimate_memory(module_kind::encoder, 1, all, 3, microbatch);
  CHECK(three.activations == 3 * a.activations);
  CHECK(plain.estimate_memory(module_kind::encoder, 1, all, 0, microbatch).activations == 0);
  CHECK_THROWS_AS(plain.estimate_memory(module_kind::encoder, 0, all, 1, microbatch), dflop::error);
}

TEST_CASE("per-call memory choices price recomputation and optimizer sharding like the options do", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  STATIC_REQUIRE(dflop::memory_model_with_choices<dflop::analytic_memory_model>);
  const dflop::analytic_memory_model plain(model);
  const std::vector<sample> microbatch{{"a", modality::text, 0, 0, 4096}};
  const auto slice = dflop::layer_range(0, 14, 28);
  // The hand-computed Qwen2.5-7B stage above with both savers on: optimizer 22,845,849,600 / 8 and
  // the recomputation activations 822,083,584 + 325,058,560.
  const auto saved = plain.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {true, 8});
  CHECK(saved == dflop::memory_breakdown{3'807'641'600, 7'615'283'200, 2'855'731'200, 822'083'584 + 325'058'560});
  // Defaults in the call ignore the model's options; the short form uses them.
  dflop::memory_options options;
  options.recompute_activations = true;
  options.optimizer_shards = 8;
  const dflop::analytic_memory_model configured(model, options);
  CHECK(configured.estimate_memory(module_kind::llm, 2, slice, 4, microbatch) == saved);
  CHECK(configured.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {}) ==
        plain.estimate_memory(module_kind::llm, 2, slice, 4, microbatch));
  CHECK(dflop::estimate_memory_with(plain, module_kind::llm, 2, slice, 4, microbatch, {true, 8}) == saved);
  CHECK_THROWS_WITH(plain.estimate_memory(module_kind::llm, 2, slice, 4, microbatch, {false, 0}),
                    Catch::Contains("optimizer_shards must be >= 1, got 0"));
}
