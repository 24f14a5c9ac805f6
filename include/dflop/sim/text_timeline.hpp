// SPDX-License-Identifier: Apache-2.0
//! \file
//! A timeline drawn with characters for terminals: one line per track, one
//! character per time bucket (F, B, W for ops, # for gradient sync, . for idle).
#pragma once

#include <dflop/sim/timeline.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace dflop {

//! Draws `line` with `width` time buckets per track, e.g.
//! `stage 0 |FFFFBFBFB.B.B...|`, then an axis line with the makespan. A bucket
//! shows the event covering its middle; an event shorter than a bucket still marks
//! the bucket it starts in if that one is otherwise idle.
[[nodiscard]] inline std::string render_text_timeline(const timeline& line, std::size_t width = 80) {
  width = std::max<std::size_t>(width, 1);
  std::size_t label_width = 0;
  for (const auto& name : line.tracks) label_width = std::max(label_width, name.size());
  std::vector<std::string> rows(line.tracks.size(), std::string(width, '.'));
  const double span = line.makespan > 0 ? line.makespan : 1.0;
  const double bucket = span / static_cast<double>(width);
  for (const auto& event : line.events) {
    if (event.track >= rows.size()) continue;
    const char mark = event.kind == timeline_kind::forward    ? 'F'
                      : event.kind == timeline_kind::backward ? 'B'
                      : event.kind == timeline_kind::weight   ? 'W'
                                                              : '#';
    auto& row = rows[event.track];
    const auto first = static_cast<std::size_t>(std::clamp(std::floor(event.start / bucket), 0.0, double(width - 1)));
    bool marked = false;
    for (std::size_t b = first; b < width; ++b) {
      const double middle = (static_cast<double>(b) + 0.5) * bucket;
      if (middle >= event.end) break;
      if (middle >= event.start) {
        row[b] = mark;
        marked = true;
      }
    }
    if (!marked && row[first] == '.' && event.end > event.start) row[first] = mark;
  }
  std::string text;
  for (std::size_t t = 0; t < rows.size(); ++t) {
    text.append(line.tracks[t]).append(label_width - line.tracks[t].size(), ' ').append(" |");
    text.append(rows[t]).append("|\n");
  }
  char end_label[64];
  std::snprintf(end_label, sizeof end_label, "%g", line.makespan);
  const std::string end_text(end_label);
  // Axis: 0 under the first bucket, the makespan ending under the last.
  text.append(label_width + 2, ' ').append("0");
  if (width > end_text.size() + 1) text.append(width - 1 - end_text.size(), ' ');
  else text.append(" ");
  text.append(end_text).append("\n");
  return text;
}

}  // namespace dflop
