// SPDX-License-Identifier: Apache-2.0
// The GPU JSON reader: an accepted GPU writes and reads back unchanged.
#include "fuzz_target.hpp"

#include <dflop/model/gpu_json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) {
    const auto gpu = dflop::parse_gpu_json(text, "fuzz.json");
    dflop::fuzz::require(dflop::to_json(dflop::gpu_from_json(dflop::to_json(gpu), "rewritten")) == dflop::to_json(gpu),
                         "a GPU round-trips");
  });
}
