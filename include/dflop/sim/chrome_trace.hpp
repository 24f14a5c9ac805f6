// SPDX-License-Identifier: Apache-2.0
//! \file
//! Timeline export as Chrome trace event JSON, which Perfetto (ui.perfetto.dev) and
//! chrome://tracing open: one thread track per rank, one complete event ("ph": "X")
//! per op named like "F3", coloured by kind, with microbatch and cost in `args`.
#pragma once

#include <dflop/error.hpp>
#include <dflop/sim/timeline.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <string_view>

namespace dflop {

namespace detail {
constexpr std::string_view trace_category(timeline_kind kind) noexcept {
  switch (kind) {
    case timeline_kind::forward: return "forward";
    case timeline_kind::backward: return "backward";
    case timeline_kind::weight: return "weight";
    case timeline_kind::gradient_sync: return "gradient_sync";
  }
  return "op";
}
// Reserved colour names of the trace viewer.
constexpr std::string_view trace_colour(timeline_kind kind) noexcept {
  switch (kind) {
    case timeline_kind::forward: return "thread_state_running";  // green
    case timeline_kind::backward: return "rail_response";        // blue
    case timeline_kind::weight: return "yellow";
    case timeline_kind::gradient_sync: return "grey";
  }
  return "generic_work";
}
}  // namespace detail

//! The trace of `line` as a JSON object {"traceEvents": [...], "displayTimeUnit": "ms"}.
//! Times are multiplied by `microseconds_per_unit` (1e6 when costs are in seconds).
[[nodiscard]] inline nlohmann::json chrome_trace(const timeline& line, double microseconds_per_unit = 1e6) {
  auto events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "dflop pipeline"}}}});
  for (std::size_t t = 0; t < line.tracks.size(); ++t) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", t}, {"args", {{"name", line.tracks[t]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", t}, {"args", {{"sort_index", t}}}});
  }
  for (const auto& event : line.events) {
    std::string name;
    if (event.kind == timeline_kind::gradient_sync) {
      name = "allreduce";
    } else {
      name.push_back(event.kind == timeline_kind::forward ? 'F' : event.kind == timeline_kind::backward ? 'B' : 'W');
      name.append(std::to_string(event.microbatch));
    }
    nlohmann::json args = {{"cost", event.end - event.start}, {"stage", event.stage}};
    if (event.kind != timeline_kind::gradient_sync) {
      args["microbatch"] = event.microbatch;
      args["chunk"] = event.chunk;
    }
    events.push_back({{"name", name},
                      {"cat", detail::trace_category(event.kind)},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", event.track},
                      {"ts", event.start * microseconds_per_unit},
                      {"dur", (event.end - event.start) * microseconds_per_unit},
                      {"cname", detail::trace_colour(event.kind)},
                      {"args", std::move(args)}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

//! Writes `chrome_trace(line)` to `path`; throws `input_error` naming the path when
//! it cannot be written.
inline void write_chrome_trace(const timeline& line, const std::string& path, double microseconds_per_unit = 1e6) {
  std::ofstream out(path);
  if (!out) throw input_error(path, 0, "cannot open file for writing");
  out << chrome_trace(line, microseconds_per_unit).dump() << '\n';
  if (!out) throw input_error(path, 0, "write failed");
}

}  // namespace dflop
