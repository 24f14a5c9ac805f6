// SPDX-License-Identifier: Apache-2.0
// The model JSON reader: an accepted model writes and reads back unchanged.
#include "fuzz_target.hpp"

#include <dflop/model/model_json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) {
    const auto model = dflop::parse_model_json(text, "fuzz.json");
    dflop::fuzz::require(dflop::model_from_json(dflop::to_json(model), "rewritten") == model, "a model round-trips");
  });
}
