// SPDX-License-Identifier: Apache-2.0
// The per-op costs CSV reader of `dflop simulate`: every accepted table has a
// cost for each (microbatch, stage), none negative.
#include "fuzz_target.hpp"

#include <dflop/sim/costs_csv.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) {
    const auto table = dflop::read_csv_text(text, "fuzz.csv");
    for (const bool require_weight : {false, true}) {
      const auto costs = dflop::read_pipeline_costs(table, require_weight);
      const std::size_t ops = std::size_t{costs.microbatches} * costs.stages;
      dflop::fuzz::require(costs.forward.size() == ops && costs.backward.size() == ops, "a cost per op");
      for (std::size_t op = 0; op < ops; ++op)
        dflop::fuzz::require(costs.forward[op] >= 0 && costs.backward[op] >= 0, "costs are non-negative");
    }
  });
}
