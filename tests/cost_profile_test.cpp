// SPDX-License-Identifier: Apache-2.0
#include "error_of.hpp"

#include <dflop/cost/fitted_cost_model.hpp>
#include <dflop/cost/flops.hpp>
#include <dflop/cost/table_cost_model.hpp>
#include <dflop/model/presets.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using dflop::module_kind;
using dflop::module_part;
using dflop::modality;
using dflop::sample;

namespace {

// LLM layer: 1 ms per 1k tokens at tp 1, half at tp 2; lm_head only at tp 1 and 2.
const char* const llm_profile =
    "module,tp,tokens,forward_ms,backward_ms,memory_mib\n"
    "llm,1,1024,1.0,2.0,10\n"
    "llm,1,2048,2.5,5.0,20\n"
    "llm,1,4096,6.0,12.0,40\n"
    "llm,2,1024,0.6,1.2,5\n"
    "llm,2,4096,3.2,6.4,20\n"
    "lm_head,1,1024,0.5,1.0,100\n"
    "lm_head,1,4096,2.0,4.0,400\n"
    "lm_head,2,1024,0.3,0.6,50\n"
    "lm_head,2,4096,1.1,2.2,200\n";

const char* const encoder_profile =
    "module,tp,items,forward_ms,backward_ms\n"
    "encoder,1,1,0.2,0.4\n"
    "encoder,1,8,1.0,2.0\n"
    "encoder,1,32,4.0,8.0\n"
    "projector,1,1,0.05,0.1\n"
    "projector,1,32,1.6,3.2\n";

sample text(std::string id, std::int64_t tokens) { return {std::move(id), modality::text, 0, 0, tokens}; }
}  // namespace

TEST_CASE("the table and fitted models satisfy the concept", "[cost]") {
  STATIC_REQUIRE(dflop::cost_model<dflop::table_cost_model>);
  STATIC_REQUIRE(dflop::cost_model<dflop::fitted_cost_model>);
}

TEST_CASE("a profile CSV reads into curves per part and TP", "[cost]") {
  const auto profile = dflop::read_profile_text(llm_profile, "llm.csv");
  CHECK(profile.size == dflop::profile_size::tokens);
  REQUIRE(profile.curves.size() == 4);
  CHECK(profile.curves[0].piece == dflop::module_piece{module_kind::llm, module_part::layer});
  CHECK(profile.curves[0].tp == 1);
  REQUIRE(profile.curves[0].points.size() == 3);
  CHECK(profile.curves[0].points[1] == dflop::profile_point{2048, 2.5e-3, 5e-3, 20.0 * 1048576, 3});
  CHECK(profile.curves[2].piece == dflop::module_piece{module_kind::llm, module_part::head});
}

TEST_CASE("malformed profile CSVs name the line and the reason", "[cost]") {
  auto profile_error = [](std::string text) {
    return dflop::test::error_of([&] { (void)dflop::read_profile_text(text, "p.csv"); });
  };
  const std::string header = "module,tp,tokens,forward_ms,backward_ms\n";
  CHECK(profile_error(header + "llm,1,1024,1,2\nvision,1,1024,1,2\n") ==
        "p.csv:3: column 'module': unknown part 'vision' (known: encoder, encoder_embedding, projector, llm, "
        "llm_embedding, lm_head)");
  CHECK(profile_error(header + "llm,0,1024,1,2\n") == "p.csv:2: column 'tp': TP degree 0 is not in [1, 1024]");
  CHECK(profile_error(header + "llm,two,1024,1,2\n") == "p.csv:2: column 'tp': 'two' is not an integer");
  CHECK(profile_error(header + "llm,1,1024,-1,2\n") == "p.csv:2: column 'forward_ms': negative value -1");
  CHECK(profile_error(header + "llm,1,1024,1,x\n") == "p.csv:2: column 'backward_ms': 'x' is not a finite number");
  CHECK(profile_error(header + "llm,1,0,1,2\n") == "p.csv:2: column 'tokens': size must be > 0");
  CHECK(profile_error(header + "llm,1,1024,1,2\n\nllm,1,1024,1,3\n") ==
        "p.csv:4: duplicate row for module 'llm', tp 1, tokens 1024 (first on line 2)");
  CHECK(profile_error(header + "llm,1,1024,1\n") == "p.csv:2: expected 5 fields (as the header), found 4");
  CHECK(profile_error("module,tp,items,forward_ms,backward_ms\nllm,1,4,1,2\n") ==
        "p.csv:2: column 'module': LLM part 'llm' needs a 'tokens' size column, not 'items'");
  CHECK(profile_error("module,tp,forward_ms,backward_ms\n") == "p.csv:1: missing size column: 'tokens' or 'items'");
  CHECK(profile_error("module,tp,tokens,items,forward_ms,backward_ms\n") ==
        "p.csv:1: both 'tokens' and 'items' columns: a profile has one size column");
  CHECK(profile_error("module,tp,tokens,forward_ms\nllm,1,1,1\n") ==
        "p.csv:1: missing column 'backward_ms' (columns: module, tp, tokens, forward_ms)");
  CHECK(profile_error("module,tp,tokens,forward_ms,backward_ms,gpu\n") ==
        "p.csv:1: unknown column 'gpu' (expected module, tp, tokens or items, forward_ms, backward_ms, optional "
        "memory_mib)");
  CHECK(profile_error(header) == "p.csv: no data rows");
}

TEST_CASE("the table model is exact at grid points and interpolates between them", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const std::vector<dflop::profile> profiles{dflop::read_profile_text(llm_profile, "llm.csv"),
                                             dflop::read_profile_text(encoder_profile, "enc.csv")};
  const dflop::table_cost_model table(model, profiles);
  for (auto [tokens, forward] : {std::pair{1024, 1.0e-3}, {2048, 2.5e-3}, {4096, 6.0e-3}}) {
    const std::vector<sample> one{text("a", tokens)};
    const auto cost = table.estimate_time(module_kind::llm, 1, one);
    CHECK(cost.layer.forward == Approx(forward).epsilon(1e-12));
    CHECK(cost.layer.backward == Approx(2 * forward).epsilon(1e-12));
  }
  const std::vector<sample> mid{text("a", 3072)};
  const auto cost = table.estimate_time(module_kind::llm, 1, mid);
  // Interpolated time 4.25 ms for a single sequence of 3072 tokens (the profile's own shape).
  CHECK(cost.layer.forward == Approx(4.25e-3).epsilon(1e-12));
  CHECK(cost.head.forward == Approx(1.5e-3).epsilon(1e-12));
  CHECK(cost.embedding == dflop::pass_time{});  // not profiled anywhere: free
  // Linear extension below and above the grid.
  const std::vector<sample> big{text("a", 8192)};
  CHECK(table.estimate_time(module_kind::llm, 1, big).head.forward == Approx(4.0e-3).epsilon(1e-12));
  // Activation memory interpolates too.
  CHECK(*table.estimate_activation_bytes({module_kind::llm, module_part::layer}, 1, dflop::uniform_shape(1, 3072)) ==
        Approx(30.0 * 1048576));
}

TEST_CASE("the table model scales packed microbatches by their attention FLOPs", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const dflop::table_cost_model table(model, dflop::read_profile_text(llm_profile, "llm.csv"));
  const std::vector<sample> packed{text("a", 2048), text("b", 2048)};
  const auto cost = table.estimate_time(module_kind::llm, 1, packed);
  const double ratio = dflop::layer_forward_flops(model.llm, dflop::shape_of(module_kind::llm, packed)) /
                       dflop::layer_forward_flops(model.llm, dflop::uniform_shape(1, 4096));
  CHECK(ratio < 1);
  CHECK(cost.layer.forward == Approx(6.0e-3 * ratio).epsilon(1e-12));
  CHECK(cost.head.forward == Approx(2.0e-3).epsilon(1e-12));  // the head is linear in tokens
}

TEST_CASE("the table model prices encoder items and rejects unprofiled TP degrees", "[cost]") {
  const auto model = dflop::find_model("siglip-400m+qwen2.5-7b");
  const std::vector<dflop::profile> profiles{dflop::read_profile_text(llm_profile, "llm.csv"),
                                             dflop::read_profile_text(encoder_profile, "enc.csv")};
  const dflop::table_cost_model table(model, profiles);
  const std::vector<sample> images{{"i", modality::image, 5, 5 * 729, 3000}, {"j", modality::image, 3, 3 * 729, 2200}};
  const auto cost = table.estimate_time(module_kind::encoder, 1, images);
  CHECK(cost.layer.forward == Approx(1.0e-3).epsilon(1e-12));  // 8 items: a grid point
  CHECK(cost.head.forward == Approx(0.4e-3).epsilon(1e-12));   // 0.05 ms/item
  CHECK_THROWS_WITH(table.estimate_time(module_kind::encoder, 2, images),
                    "table_cost_model: no profile for 'encoder' at tp 2 (profiled tp: 1)");
  CHECK_THROWS_WITH(table.estimate_time(module_kind::llm, 4, images),
                    "table_cost_model: no profile for 'llm' at tp 4 (profiled tp: 1, 2)");
  // The same curve in two profiles is an error naming the second file's line.
  const std::vector<dflop::profile> twice{profiles[0], dflop::read_profile_text(llm_profile, "again.csv")};
  CHECK(dflop::test::error_of([&] { dflop::table_cost_model(model, twice); }) ==
        "again.csv:2: module 'llm' at tp 1 is already in another profile");
}

TEST_CASE("the fitted model recovers a quadratic profile and sums attention per sample", "[cost]") {
  // Synthetic profile: forward_ms = 0.2 + 1e-3 n + 1e-7 n^2, backward twice that.
  std::string csv = "module,tp,tokens,forward_ms,backward_ms\n";
  for (int n = 512; n <= 8192; n += 512) {
    const double forward = 0.2 + 1e-3 * n + 1e-7 * n * n;
    csv += "llm,1," + std::to_string(n) + "," + std::to_string(forward) + "," + std::to_string(2 * forward) + "\n";
  }
  const auto fitted = dflop::fitted_cost_model::from_profile(dflop::read_profile_text(csv, "fit.csv"));
  REQUIRE(fitted.curves().size() == 1);
  const auto& curve = fitted.curves()[0];
  CHECK(curve.forward.a == Approx(0.2e-3).epsilon(0.01));
  CHECK(curve.forward.b == Approx(1e-6).epsilon(0.01));
  CHECK(curve.forward.c == Approx(1e-10).epsilon(0.01));
  CHECK(curve.forward.points == 16);
  CHECK(curve.forward.r_squared > 0.999999);
  const std::vector<sample> packed{text("a", 1000), text("b", 3000)};
  const auto cost = fitted.estimate_time(module_kind::llm, 1, packed);
  // a + b (1000 + 3000) + c (1000^2 + 3000^2), not c * 4000^2.
  const double expected = curve.forward.a + curve.forward.b * 4000 + curve.forward.c * (1e6 + 9e6);
  CHECK(cost.layer.forward == Approx(expected).epsilon(1e-12));
  CHECK(cost.layer.forward < curve.forward(4000));
  CHECK(cost.layer.backward == Approx(2 * cost.layer.forward).epsilon(1e-4));
  CHECK(fitted.estimate_time(module_kind::llm, 1, {}) == dflop::module_cost{});
  CHECK_THROWS_AS(fitted.estimate_time(module_kind::encoder, 1, packed), dflop::error);  // no encoder layers
}

TEST_CASE("a fitted curve needs three sizes", "[cost]") {
  const auto profile = dflop::read_profile_text(llm_profile, "llm.csv");
  CHECK(dflop::test::error_of([&] { (void)dflop::fitted_cost_model::from_profile(profile); }) ==
        "llm.csv:5: module 'llm' at tp 2 has 2 sizes; a quadratic fit needs at least 3");
}

TEST_CASE("a fitted model never prices more tokens below fewer, past a small profile that bends down", "[cost]") {
  // A torch trainer's measured LLM layer at 16, 48 and 96 tokens, concave in n
  // (its slope falls from 0.064 to 0.057 ms per token): the free quadratic fit's
  // curvature is negative and, carried to thousands of tokens, prices them at 0.
  const char* const csv =
      "module,tp,tokens,forward_ms,backward_ms\n"
      "llm,1,16,1.4183695,3.5075615\n"
      "llm,1,48,3.4932755,5.9\n"
      "llm,1,96,6.2,8.0\n";
  const auto profile = dflop::read_profile_text(csv, "concave.csv");
  const auto fitted = dflop::fitted_cost_model::from_profile(profile);
  const auto& curve = fitted.curves().front();
  CHECK(curve.forward.c >= 0);
  CHECK(curve.backward.c >= 0);
  CHECK(curve.backward.b >= 0);
  double previous_forward = 0, previous_backward = 0;
  for (std::int64_t tokens = 16; tokens <= 16384; tokens *= 2) {
    const auto cost = fitted.estimate_time(module_kind::llm, 1, std::vector<sample>{text("s", tokens)});
    CAPTURE(tokens, cost);
    CHECK(cost.layer.forward >= previous_forward);
    CHECK(cost.layer.backward >= previous_backward);
    previous_forward = cost.layer.forward;
    previous_backward = cost.layer.backward;
  }
  CHECK(previous_forward > 0.5);   // 16k tokens: near a second (ms in the profile, seconds priced)
  CHECK(previous_backward > 0.5);
}
