// SPDX-License-Identifier: Apache-2.0
// The profile CSV reader (input of the table and fitted cost models).
#include "fuzz_target.hpp"

#include <dflop/cost/profile.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) { (void)dflop::read_profile_text(text, "fuzz.csv"); });
}
