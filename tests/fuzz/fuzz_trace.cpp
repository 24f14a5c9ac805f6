// SPDX-License-Identifier: Apache-2.0
// The JSONL trace reader: every accepted sample is self-consistent, and
// writing the trace and reading it back gives the same samples.
#include "fuzz_target.hpp"

#include <dflop/workload/trace.hpp>

#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) {
    const auto samples = dflop::read_trace_text(text, "fuzz.jsonl");
    for (const auto& s : samples) dflop::fuzz::require(!dflop::find_inconsistency(s), "an accepted sample is consistent");
    std::ostringstream out;
    dflop::write_trace(out, samples);
    dflop::fuzz::require(dflop::read_trace_text(out.str(), "rewritten") == samples, "a trace round-trips");
  });
}
