// SPDX-License-Identifier: Apache-2.0
#include <dflop/workload/sample.hpp>

#include <catch2/catch.hpp>

using dflop::modality;
using dflop::sample;

TEST_CASE("modality names round-trip and reject unknown spellings", "[workload]") {
  for (modality kind : dflop::all_modalities) CHECK(dflop::parse_modality(dflop::to_string(kind)) == kind);
  CHECK_FALSE(dflop::parse_modality("Image").has_value());
  CHECK_FALSE(dflop::parse_modality("").has_value());
}

TEST_CASE("consistent samples pass, each inconsistency is named", "[workload]") {
  const sample text{"t", modality::text, 0, 0, 512};
  const sample image{"i", modality::image, 10, 7290, 6561};
  CHECK_FALSE(dflop::find_inconsistency(text).has_value());
  CHECK_FALSE(dflop::find_inconsistency(image).has_value());

  auto reason = [](sample s) { return dflop::find_inconsistency(s).value_or("consistent"); };
  sample bad = text;
  bad.encoder_items = 1;
  CHECK_THAT(reason(bad), Catch::Contains("text sample"));
  bad = image;
  bad.llm_tokens = -3;
  CHECK_THAT(reason(bad), Catch::Contains("negative llm_tokens (-3)"));
  bad = image;
  bad.encoder_items = 0;
  CHECK_THAT(reason(bad), Catch::Contains("at least one encoder item"));
  bad = image;
  bad.encoder_tokens = 3;
  CHECK_THAT(reason(bad), Catch::Contains("less than encoder_items"));
  bad = image;
  bad.llm_tokens = 0;
  CHECK_THAT(reason(bad), Catch::Contains("llm_tokens is 0"));
  bad = image;
  bad.id.clear();
  CHECK_THAT(reason(bad), Catch::Contains("empty id"));
}
