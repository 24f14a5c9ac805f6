// SPDX-License-Identifier: Apache-2.0
// The plan file reader: an accepted plan writes and reads back unchanged, and
// its every method lays out (the reader rejects what cannot run).
#include "fuzz_target.hpp"

#include <dflop/plan/plan_file.hpp>
#include <dflop/plan/plan_json.hpp>
#include <dflop/plan/plan_layout.hpp>
#include <dflop/schedule/by_name.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return dflop::fuzz::run(data, size, [](std::string_view text) {
    const auto plan = dflop::parse_plan_json(text, "fuzz.json");
    const auto written = dflop::to_json(plan);
    dflop::fuzz::require(dflop::to_json(dflop::plan_from_json(written, "rewritten")) == written, "a plan round-trips");
    const dflop::named_schedule schedule(plan.schedule);
    (void)dflop::make_plan_layout(plan, dflop::plan_method::dflop, schedule);
    for (const auto& baseline : plan.baselines) (void)dflop::make_plan_layout(plan, baseline.method, schedule);
  });
}
