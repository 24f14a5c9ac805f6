// SPDX-License-Identifier: Apache-2.0
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/statistics.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

using dflop::modality;
using dflop::sample;

TEST_CASE("the same seed gives the same mixture, a different seed a different one", "[workload]") {
  for (std::string_view name : dflop::mixture_preset_names) {
    INFO(name);
    const auto first = dflop::generate_mixture(name, 500, 7);
    CHECK(first == dflop::generate_mixture(dflop::mixture_preset(name), 500, 7));
    CHECK(first != dflop::generate_mixture(name, 500, 8));
    // A longer run starts with the shorter one only up to the id width, which is fixed at 6 digits here.
    const auto longer = dflop::generate_mixture(name, 1000, 7);
    CHECK(std::equal(first.begin(), first.end(), longer.begin()));
  }
  CHECK(dflop::default_workload() ==
        dflop::generate_mixture("onevision", dflop::default_workload_samples, dflop::default_workload_seed));
}

TEST_CASE("generated samples are consistent, uniquely numbered and follow the documented formulas", "[workload]") {
  constexpr std::int64_t tile = 729;
  for (std::string_view name : dflop::mixture_preset_names) {
    INFO(name);
    const auto spec = dflop::mixture_preset(name);
    const auto samples = dflop::generate_mixture(spec, 20000, 1);
    REQUIRE(samples.size() == 20000);
    CHECK(samples.front().id == "s000000");
    CHECK(samples.back().id == "s019999");
    std::set<std::string> ids;
    std::int64_t most_image_items = 0;
    std::int64_t most_frames = 0;
    for (const sample& s : samples) {
      INFO(s);
      REQUIRE_FALSE(dflop::find_inconsistency(s).has_value());
      ids.insert(s.id);
      const auto prompt_fits = [&](std::int64_t text) {
        return text >= spec.prompt_tokens.min && text <= spec.prompt_tokens.max;
      };
      switch (s.kind) {
        case modality::text:
          CHECK((s.llm_tokens >= spec.text_only_tokens.min && s.llm_tokens <= spec.text_only_tokens.max));
          break;
        case modality::image: {
          CHECK(s.encoder_tokens == s.encoder_items * tile);
          CHECK((s.encoder_items >= 1 && s.encoder_items <= 37));
          most_image_items = std::max(most_image_items, s.encoder_items);
          if (s.encoder_items == 1) {
            CHECK(prompt_fits(s.llm_tokens - (tile + 1)));
          } else {
            const std::int64_t grid_tiles = s.encoder_items - 1;
            const std::int64_t fixed = (tile + 1) + std::min<std::int64_t>(grid_tiles, 9) * tile;
            // the remainder is one newline per grid row (1..6) plus the prompt
            CHECK(s.llm_tokens - fixed >= 1 + spec.prompt_tokens.min);
            CHECK(s.llm_tokens - fixed <= 6 + spec.prompt_tokens.max);
          }
          break;
        }
        case modality::multi_image:
          CHECK((s.encoder_items >= 2 && s.encoder_items <= 8));
          CHECK(s.encoder_tokens == s.encoder_items * tile);
          CHECK(prompt_fits(s.llm_tokens - s.encoder_items * (tile + 1)));
          break;
        case modality::video:
          CHECK((s.encoder_items >= spec.min_frames && s.encoder_items <= 32));
          CHECK(s.encoder_tokens == s.encoder_items * tile);
          CHECK(prompt_fits(s.llm_tokens - s.encoder_items * 210));
          most_frames = std::max(most_frames, s.encoder_items);
          break;
        case modality::audio:
          CHECK((s.encoder_items >= 1 && s.encoder_items <= 4));
          CHECK(s.encoder_tokens == s.encoder_items * 1500);
          CHECK(prompt_fits(s.llm_tokens - s.encoder_items * 750));
          break;
      }
    }
    CHECK(ids.size() == samples.size());
    if (spec.weights.image > 0) CHECK(most_image_items == 37);  // a full 6x6 grid plus the base tile occurs
    if (spec.weights.video > 0) CHECK(most_frames == 32);
  }
}

TEST_CASE("mixture statistics match the spec", "[workload]") {
  for (std::string_view name : dflop::mixture_preset_names) {
    INFO(name);
    const auto spec = dflop::mixture_preset(name);
    const auto samples = dflop::generate_mixture(spec, 20000, 3);
    const auto statistics = dflop::describe_workload(samples);
    for (modality kind : dflop::all_modalities) {
      INFO(kind);
      const double expected = spec.weights.of(kind) / spec.weights.total();
      CHECK(statistics.share(kind) == Approx(expected).margin(0.02));
      if (expected == 0) CHECK(statistics.count(kind) == 0);
    }
    // Text-only lengths are log-normal: their median is the spec's median (clamping leaves it alone).
    std::vector<std::int64_t> text_lengths;
    for (const sample& s : samples)
      if (s.kind == modality::text) text_lengths.push_back(s.llm_tokens);
    if (text_lengths.size() > 1000)
      CHECK(static_cast<double>(dflop::summarize_values(text_lengths).p50) ==
            Approx(spec.text_only_tokens.median).epsilon(0.1));
  }
  // Untiled share of single images in `image-only`.
  const auto images = dflop::generate_mixture("image-only", 20000, 4);
  const auto untiled = std::count_if(images.begin(), images.end(), [](const sample& s) { return s.encoder_items == 1; });
  CHECK(static_cast<double>(untiled) / 20000.0 == Approx(0.1).margin(0.015));
}

TEST_CASE("a custom spec is honoured exactly where it leaves no freedom", "[workload]") {
  dflop::mixture_spec spec;
  spec.name = "fixed-video";
  spec.weights = {.video = 1};
  spec.min_frames = spec.max_frames = 32;
  spec.prompt_tokens = {.median = 100, .sigma = 0, .min = 0, .max = 1000};
  for (const sample& s : dflop::generate_mixture(spec, 50, 0))
    CHECK(s == sample{s.id, modality::video, 32, 32 * 729, 32 * 210 + 100});
  // Clamping applies to generated lengths only.
  spec.prompt_tokens = {.median = 100000, .sigma = 0, .min = 0, .max = 1000};
  CHECK(dflop::generate_mixture(spec, 1, 0).front().llm_tokens == 32 * 210 + 1000);
}

TEST_CASE("invalid specs and unknown preset names are rejected with the reason", "[workload]") {
  CHECK_THROWS_WITH(dflop::mixture_preset("llava"),
                    "mixture: unknown mixture 'llava' (known: onevision video-heavy text-heavy image-only omni)");
  CHECK_THROWS_AS(dflop::generate_mixture("llava", 1, 0), dflop::input_error);
  dflop::mixture_spec spec;
  spec.name = "broken";
  spec.weights = {.text = 0};
  CHECK_THROWS_WITH(dflop::generate_mixture(spec, 1, 0), "mixture 'broken': the modality weights sum to 0");
  spec.weights = {.text = 1, .image = -1};
  CHECK_THROWS_WITH(dflop::generate_mixture(spec, 1, 0), Catch::Contains("weight of image must be"));
  spec.weights = {.text = 1};
  spec.min_frames = 40;
  CHECK_THROWS_WITH(dflop::generate_mixture(spec, 1, 0), Catch::Contains("min_frames (40) exceeds max_frames (32)"));
  spec.min_frames = 8;
  spec.text_only_tokens.min = 0;
  CHECK_THROWS_WITH(dflop::generate_mixture(spec, 1, 0), Catch::Contains("text_only_tokens needs 1 <= min"));
  spec.text_only_tokens.min = 1;
  spec.untiled_image_share = 2;
  CHECK_THROWS_WITH(dflop::generate_mixture(spec, 1, 0), Catch::Contains("untiled_image_share must be in [0, 1]"));
  spec.untiled_image_share = 0;
  CHECK(dflop::generate_mixture(spec, 3, 0).size() == 3);
}
