// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/flops.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/util/random.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using dflop::microbatch_shape;
using dflop::module_kind;
using dflop::modality;
using dflop::sample;

namespace {
sample text_sample(std::int64_t tokens) {
  std::string id = "t";
  id.append(std::to_string(tokens));
  return {id, modality::text, 0, 0, tokens};
}
}  // namespace

TEST_CASE("a Qwen2.5-7B layer at s = 4096 costs the hand-computed FLOPs", "[cost]") {
  // h = 3584, f = 18944, a = 28, g = 4, s = 4096.
  // projections 2 s h^2 (2 + 2 g/a) = 2 * 4096 * 12,845,056 * 16/7       =   240,518,168,576
  // attention   2 s^2 h             = 2 * 16,777,216 * 3584              =   120,259,084,288
  // gated MLP   6 s h f             = 6 * 4096 * 3584 * 18944            = 1,668,594,794,496
  // total                                                                = 2,029,372,047,360
  const auto qwen = dflop::find_llm("qwen2.5-7b");
  CHECK(dflop::layer_forward_flops(qwen, dflop::uniform_shape(1, 4096)) == 2'029'372'047'360.0);
  // LM head 2 s h V = 2 * 4096 * 3584 * 152064 = 4,464,618,504,192.
  CHECK(dflop::lm_head_forward_flops(qwen, dflop::uniform_shape(1, 4096)) == 4'464'618'504'192.0);
}

TEST_CASE("a SigLIP layer on one 729-token tile costs the hand-computed FLOPs", "[cost]") {
  // 8 n h^2 = 8 * 729 * 1152^2 = 7,739,670,528; 4 n^2 h = 4 * 729^2 * 1152 = 2,448,880,128;
  // 4 n h f = 4 * 729 * 1152 * 4304 = 14,458,134,528; total 24,646,685,184.
  const auto siglip = dflop::find_encoder("siglip-400m");
  const sample image{"i", modality::image, 1, 729, 730};
  CHECK(dflop::layer_forward_flops(siglip, dflop::shape_of(module_kind::encoder, {&image, 1})) ==
        24'646'685'184.0);
  // A 10-tile image is 10 tiles' worth: attention per tile, not over all 7290 tokens.
  const sample tiled{"j", modality::image, 10, 7290, 6561};
  CHECK(dflop::layer_forward_flops(siglip, dflop::shape_of(module_kind::encoder, {&tiled, 1})) ==
        10 * 24'646'685'184.0);
  // Text adds no encoder work.
  const sample text = text_sample(900);
  CHECK(dflop::shape_of(module_kind::encoder, {&text, 1}) == microbatch_shape{});
}

TEST_CASE("projector, patch embedding and training ratios follow their documented formulas", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const auto shape = dflop::uniform_shape(1, 729);
  // 2 N (1152 * 3584 + 3584^2) = 2 * 729 * 16,973,824 = 24,747,835,392.
  CHECK(dflop::projector_forward_flops(model.projector, shape) == 24'747'835'392.0);
  // 2 N 3 p^2 h = 2 * 729 * 588 * 1152 = 987,614,208.
  CHECK(dflop::part_forward_flops(model, {module_kind::encoder, dflop::module_part::embedding}, shape) ==
        987'614'208.0);
  CHECK(dflop::part_forward_flops(model, {module_kind::llm, dflop::module_part::embedding}, shape) == 0.0);
  CHECK(1 + dflop::backward_flops_ratio(false) == 3.0);
  CHECK((1 + dflop::backward_flops_ratio(true)) / (1 + dflop::backward_flops_ratio(false)) == Approx(4.0 / 3.0));
}

TEST_CASE("packed LLM attention is the sum of the samples' squares (property)", "[cost]") {
  const auto qwen = dflop::find_llm("qwen2.5-7b");
  dflop::random_generator rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<sample> microbatch;
    const auto count = rng.between(1, 12);
    double tokens = 0, squares = 0, separate = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const auto n = rng.between(1, 8192);
      microbatch.push_back(text_sample(n));
      tokens += static_cast<double>(n);
      squares += static_cast<double>(n) * static_cast<double>(n);
      separate += dflop::layer_forward_flops(qwen, dflop::uniform_shape(1, static_cast<double>(n)));
    }
    const auto shape = dflop::shape_of(module_kind::llm, microbatch);
    REQUIRE(shape.units == static_cast<double>(count));
    REQUIRE(shape.tokens == tokens);
    REQUIRE(shape.squared_tokens == squares);
    const double packed = dflop::layer_forward_flops(qwen, shape);
    // Packing is the sum of its samples, and the attention term is exactly 2 h sum(s_i^2).
    REQUIRE(packed == Approx(separate).epsilon(1e-12));
    const double linear = dflop::layer_forward_flops(qwen, {static_cast<double>(count), tokens, 0});
    REQUIRE(packed - linear == Approx(2.0 * 3584 * squares).epsilon(1e-9));
    // Never the square of the packed length (strictly less with two or more samples).
    if (count > 1) REQUIRE(packed < dflop::layer_forward_flops(qwen, dflop::uniform_shape(1, tokens)));
  }
}
