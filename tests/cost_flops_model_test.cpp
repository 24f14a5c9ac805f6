// SPDX-License-Identifier: Apache-2.0
#include <dflop/cost/flops_cost_model.hpp>
#include <dflop/model/presets.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <vector>

using dflop::module_kind;
using dflop::module_part;
using dflop::modality;
using dflop::sample;

TEST_CASE("the shipped cost models satisfy the concept", "[cost]") {
  STATIC_REQUIRE(dflop::cost_model<dflop::flops_cost_model>);
  STATIC_REQUIRE_FALSE(dflop::cost_model<int>);
}

TEST_CASE("flops_cost_model divides FLOPs by the saturating throughput curve", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const auto gpu = dflop::find_gpu("h100-80gb");
  const dflop::flops_cost_model costs(model, gpu);
  const std::vector<sample> one{{"a", modality::text, 0, 0, 4096}};
  const auto cost = costs.estimate_time(module_kind::llm, 1, one);
  // (F + w_half) / (peak * eff_max), F = 2,029,372,047,360 (cost_flops_test).
  const double forward = (2'029'372'047'360.0 + 3e10) / (989e12 * 0.55);
  CHECK(cost.layer.forward == Approx(forward).epsilon(1e-12));
  CHECK(cost.layer.backward == Approx(2 * forward).epsilon(1e-12));
  CHECK(cost.embedding == dflop::pass_time{});  // a lookup, no TP: free
  CHECK(cost.head.forward == Approx((4'464'618'504'192.0 + 3e10) / (989e12 * 0.55)).epsilon(1e-12));

  // The curve rises with work and stays below its maximum.
  const dflop::throughput_curve curve;
  double last = 0;
  for (double w = 1e8; w < 1e15; w *= 3) {
    CHECK(curve.efficiency(w) > last);
    CHECK(curve.efficiency(w) < curve.max_efficiency);
    last = curve.efficiency(w);
  }
  CHECK(curve.efficiency(curve.half_saturation_flops) == Approx(curve.max_efficiency / 2));

  // Recomputation: backward redoes the forward (compute 3x instead of 2x).
  dflop::flops_cost_options options;
  options.recompute_activations = true;
  const dflop::flops_cost_model recompute(model, gpu, options);
  CHECK(recompute.estimate_time(module_kind::llm, 1, one).layer.backward == Approx(3 * forward).epsilon(1e-12));
}

TEST_CASE("tensor parallelism splits the work and adds all-reduces", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const auto gpu = dflop::find_gpu("h100-80gb");
  const dflop::flops_cost_model costs(model, gpu);
  const std::vector<sample> one{{"a", modality::text, 0, 0, 4096}};
  const auto tp4 = costs.estimate_time(module_kind::llm, 4, one);
  // All-reduce of 4096 x 3584 x 2 bytes on 4 GPUs: 2 * 3/4 * bytes / 450e9 + 6 * 5e-6.
  const double reduce = 1.5 * 4096.0 * 3584 * 2 / 450e9 + 6 * 5e-6;
  CHECK(costs.all_reduce_seconds(4096.0 * 3584 * 2, 4) == Approx(reduce).epsilon(1e-12));
  const double compute = (2'029'372'047'360.0 / 4 + 3e10) / (989e12 * 0.55);
  CHECK(tp4.layer.forward == Approx(compute + 2 * reduce).epsilon(1e-12));
  CHECK(tp4.layer.backward == Approx(2 * compute + 2 * reduce).epsilon(1e-12));
  CHECK(tp4.embedding.forward == Approx(reduce).epsilon(1e-12));
  CHECK(tp4.layer.forward < costs.estimate_time(module_kind::llm, 1, one).layer.forward);
  CHECK(costs.all_reduce_seconds(1e9, 1) == 0.0);
  CHECK_THROWS_AS(costs.estimate_time(module_kind::llm, 0, one), dflop::error);
}

TEST_CASE("packing prices attention per sample; the encoder prices items", "[cost]") {
  const dflop::flops_cost_model costs(dflop::find_model("siglip-400m+qwen2.5-7b"), dflop::find_gpu("h100-80gb"));
  const std::vector<sample> packed{{"a", modality::text, 0, 0, 2048}, {"b", modality::text, 0, 0, 2048}};
  const std::vector<sample> single{{"c", modality::text, 0, 0, 4096}};
  CHECK(costs.estimate_time(module_kind::llm, 1, packed).layer.forward <
        costs.estimate_time(module_kind::llm, 1, single).layer.forward);
  // Same linear work, cheaper attention: the difference is 2 h (4096^2 - 2 * 2048^2) FLOPs.
  const double saved = 2.0 * 3584 * (4096.0 * 4096 - 2 * 2048.0 * 2048) / (989e12 * 0.55);
  CHECK(costs.estimate_time(module_kind::llm, 1, single).layer.forward -
            costs.estimate_time(module_kind::llm, 1, packed).layer.forward ==
        Approx(saved).epsilon(1e-9));

  const std::vector<sample> images{{"i", modality::image, 10, 7290, 6561}, {"t", modality::text, 0, 0, 300}};
  const auto encoder = costs.estimate_time(module_kind::encoder, 1, images);
  CHECK(encoder.layer.forward == Approx((10 * 24'646'685'184.0 + 3e10) / (989e12 * 0.55)).epsilon(1e-12));
  CHECK(encoder.head.forward > 0);
  CHECK(encoder.embedding.forward > 0);
  const std::vector<sample> texts{{"t", modality::text, 0, 0, 300}};
  CHECK(costs.estimate_time(module_kind::encoder, 2, texts) == dflop::module_cost{});
  CHECK(costs.estimate_time(module_kind::llm, 1, {}) == dflop::module_cost{});
}

TEST_CASE("module_cost prices a stage's layer range with its extra parts", "[cost]") {
  const dflop::module_cost cost{{1, 2}, {0.5, 0.25}, {4, 8}};
  CHECK(cost.stage(dflop::layer_range(0, 3, 10)) == dflop::pass_time{3.5, 6.25});
  CHECK(cost.stage(dflop::layer_range(3, 7, 10)) == dflop::pass_time{4, 8});
  CHECK(cost.stage(dflop::layer_range(7, 10, 10)) == dflop::pass_time{7, 14});
  CHECK(cost.whole(10) == dflop::pass_time{14.5, 28.25});
  CHECK(cost.whole(10).total() == 42.75);
  std::ostringstream text;
  text << cost;
  CHECK(text.str() ==
        "module_cost{layer=pass_time{forward=1, backward=2}, embedding=pass_time{forward=0.5, backward=0.25}, "
        "head=pass_time{forward=4, backward=8}}");
}
