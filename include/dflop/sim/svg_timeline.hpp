// SPDX-License-Identifier: Apache-2.0
//! \file
//! A timeline drawn as a self-contained SVG picture (no scripts, no external fonts
//! or style sheets): one row per track with its name on the left, one rectangle per
//! op coloured by kind with its microbatch inside when it fits, a time axis in
//! seconds, a legend and a title line. Opens in any browser or image viewer.
#pragma once

#include <dflop/error.hpp>
#include <dflop/sim/timeline.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

namespace dflop {

//! How `render_svg_timeline` lays out the picture.
struct svg_options {
  std::uint32_t width = 1200;                     //!< picture width in pixels (at least 240 is used)
  std::uint32_t row_height = 24;                  //!< height of one track's row in pixels (at least 10 is used)
  std::string title = "dflop pipeline timeline";  //!< left part of the title line (the makespan is on its right)

  friend bool operator==(const svg_options&, const svg_options&) = default;
};

namespace detail {

// The same four kinds the Chrome trace tells apart, as explicit colours that keep
// white text legible (the trace's reserved colour names have no fixed RGB values).
constexpr std::string_view svg_colour(timeline_kind kind) noexcept {
  switch (kind) {
    case timeline_kind::forward: return "#3e6fb0";        // blue
    case timeline_kind::backward: return "#3d9a50";       // green
    case timeline_kind::weight: return "#8b5cb8";         // purple
    case timeline_kind::gradient_sync: return "#7f7f7f";  // grey
  }
  return "#000000";
}

constexpr std::string_view svg_legend_label(timeline_kind kind) noexcept {
  switch (kind) {
    case timeline_kind::forward: return "forward (F)";
    case timeline_kind::backward: return "backward (B)";
    case timeline_kind::weight: return "weight gradient (W)";
    case timeline_kind::gradient_sync: return "gradient all-reduce";
  }
  return "op";
}

// Text content or attribute value: the five XML specials as entities; control
// characters XML 1.0 cannot carry become '?'.
inline void svg_append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    switch (c) {
      case '&': out.append("&amp;"); break;
      case '<': out.append("&lt;"); break;
      case '>': out.append("&gt;"); break;
      case '"': out.append("&quot;"); break;
      case '\'': out.append("&apos;"); break;
      default:
        out.push_back(static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' ? '?' : c);
    }
  }
}

// Coordinates are kept in integer tenths of a pixel so that neighbouring ops abut
// exactly and every number prints short ("123.4", or "123" for whole pixels).
inline long long svg_tenths(double pixels) noexcept { return std::llround(pixels * 10.0); }

inline void svg_append_tenths(std::string& out, long long tenths) {
  if (tenths < 0) {
    out.push_back('-');
    tenths = -tenths;
  }
  out.append(std::to_string(tenths / 10));
  if (tenths % 10 != 0) {
    out.push_back('.');
    out.push_back(static_cast<char>('0' + tenths % 10));
  }
}

inline void svg_append_pixels(std::string& out, double pixels) { svg_append_tenths(out, svg_tenths(pixels)); }

inline void svg_append_number(std::string& out, double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  out.append(text);
}

// Code points of UTF-8 text (continuation bytes do not count).
inline std::size_t svg_text_length(std::string_view text) noexcept {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The smallest tick spacing of 1, 2 or 5 times a power of ten giving at most
// `most` intervals over `span`.
inline double svg_tick_step(double span, double most) noexcept {
  const double raw = span / std::max(most, 1.0);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double normal = raw / magnitude;
  return (normal <= 1 ? 1.0 : normal <= 2 ? 2.0 : normal <= 5 ? 5.0 : 10.0) * magnitude;
}

}  // namespace detail

//! Draws `line` as an SVG document (starting `<svg`, ending `</svg>` and a newline).
//! The picture holds one `<rect>` for the background, then one per event in the
//! order of `line.events` (x and width proportional to start and duration, y given
//! by the track), then one per legend entry (the kinds that occur, in
//! `timeline_kind` order). Events on a track `line` does not name are left out.
[[nodiscard]] inline std::string render_svg_timeline(const timeline& line, const svg_options& options = {}) {
  constexpr double pad = 12;
  constexpr double label_font = 12;
  constexpr double label_char_width = 7;  // a generous average for 12 px sans-serif
  const double width = std::max<double>(options.width, 240);
  const double row_height = std::max<double>(options.row_height, 10);
  const std::size_t tracks = line.tracks.size();

  double span = line.makespan;
  std::array<bool, 4> kinds_present{};
  for (const auto& event : line.events) {
    if (event.track >= tracks) continue;
    span = std::max(span, event.end);
    if (const auto k = static_cast<std::size_t>(event.kind); k < kinds_present.size()) kinds_present[k] = true;
  }
  if (!(span > 0) || !std::isfinite(span)) span = 1;

  std::size_t label_chars = 0;
  for (const auto& name : line.tracks) label_chars = std::max(label_chars, detail::svg_text_length(name));
  const double plot_left =
      std::round(std::clamp(static_cast<double>(label_chars) * label_char_width + 2 * pad, 72.0, width / 3));
  const double plot_right = width - 2 * pad;  // room for the last tick label
  const double scale = (plot_right - plot_left) / span;
  const double top = 36;
  const double bottom = top + static_cast<double>(tracks) * row_height;
  const double height = bottom + 56;
  const double inset = row_height >= 16 ? 3 : 1;
  const double op_font = std::min(11.0, row_height - 2 * inset - 2);

  std::string svg;
  svg.reserve(1024 + line.events.size() * 110);
  const auto attribute = [&svg](std::string_view name, double pixels) {
    svg.append(" ").append(name).append("=\"");
    detail::svg_append_pixels(svg, pixels);
    svg.append("\"");
  };
  const auto text_at = [&](double x, double y, std::string_view content) {
    svg.append("<text");
    attribute("x", x);
    attribute("y", y);
    svg.append(">");
    detail::svg_append_escaped(svg, content);
    svg.append("</text>\n");
  };

  svg.append("<svg xmlns=\"http://www.w3.org/2000/svg\"");
  attribute("width", width);
  attribute("height", height);
  svg.append(" viewBox=\"0 0 ");
  detail::svg_append_pixels(svg, width);
  svg.append(" ");
  detail::svg_append_pixels(svg, height);
  svg.append("\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n");
  svg.append("<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");

  // Title line: the title on the left, the makespan on the right.
  if (!options.title.empty()) {
    svg.append("<g font-size=\"15\" font-weight=\"bold\" fill=\"#222222\">");
    text_at(pad, 23, options.title);
    svg.append("</g>\n");
  }
  {
    std::string summary = "makespan ";
    detail::svg_append_number(summary, line.makespan);
    summary.append(" s");
    svg.append("<g font-size=\"12\" fill=\"#555555\" text-anchor=\"end\">");
    text_at(width - pad, 23, summary);
    svg.append("</g>\n");
  }

  // Grid: a faint line under every row and one up from every tick; then the axis.
  const double step = detail::svg_tick_step(span, std::clamp((plot_right - plot_left) / 100, 2.0, 10.0));
  const auto ticks = static_cast<std::size_t>(std::floor(span / step * (1 + 1e-9))) + 1;
  svg.append("<path fill=\"none\" stroke=\"#e3e3e3\" stroke-width=\"1\" d=\"");
  for (std::size_t t = 0; t < tracks; ++t) {
    svg.append("M");
    detail::svg_append_pixels(svg, plot_left);
    svg.append(" ");
    detail::svg_append_pixels(svg, top + static_cast<double>(t) * row_height + 0.5);
    svg.append("H");
    detail::svg_append_pixels(svg, plot_right);
  }
  for (std::size_t i = 1; i < ticks; ++i) {
    svg.append("M");
    detail::svg_append_pixels(svg, plot_left + static_cast<double>(i) * step * scale);
    svg.append(" ");
    detail::svg_append_pixels(svg, top);
    svg.append("V");
    detail::svg_append_pixels(svg, bottom);
  }
  svg.append("\"/>\n<path fill=\"none\" stroke=\"#444444\" stroke-width=\"1\" d=\"M");
  detail::svg_append_pixels(svg, plot_left);
  svg.append(" ");
  detail::svg_append_pixels(svg, bottom + 0.5);
  svg.append("H");
  detail::svg_append_pixels(svg, plot_right);
  for (std::size_t i = 0; i < ticks; ++i) {
    svg.append("M");
    detail::svg_append_pixels(svg, plot_left + static_cast<double>(i) * step * scale);
    svg.append(" ");
    detail::svg_append_pixels(svg, bottom);
    svg.append("v5");
  }
  svg.append("\"/>\n<g font-size=\"11\" fill=\"#444444\" text-anchor=\"middle\">\n");
  for (std::size_t i = 0; i < ticks; ++i) {
    std::string label;
    detail::svg_append_number(label, static_cast<double>(i) * step);
    text_at(plot_left + static_cast<double>(i) * step * scale, bottom + 18, label);
  }
  svg.append("</g>\n<g font-size=\"11\" fill=\"#444444\" text-anchor=\"end\">");
  text_at(plot_left - 8, bottom + 18, "time (s)");
  svg.append("</g>\n");

  // Track names, right-aligned against the plot.
  svg.append("<g font-size=\"12\" fill=\"#222222\" text-anchor=\"end\">\n");
  for (std::size_t t = 0; t < tracks; ++t)
    text_at(plot_left - 8, top + (static_cast<double>(t) + 0.5) * row_height + label_font * 0.35, line.tracks[t]);
  svg.append("</g>\n");

  // One rectangle per op; a thin white edge keeps neighbours of one kind apart.
  const auto row_y = [&](std::uint32_t track) { return top + static_cast<double>(track) * row_height + inset; };
  const auto left_tenths = [&](double time) {
    return detail::svg_tenths(plot_left + std::clamp(time, 0.0, span) * scale);
  };
  svg.append("<g stroke=\"#ffffff\" stroke-width=\"0.5\">\n");
  for (const auto& event : line.events) {
    if (event.track >= tracks) continue;
    const long long x = left_tenths(event.start);
    const long long w = std::max(left_tenths(event.end) - x, 0LL);
    svg.append("<rect x=\"");
    detail::svg_append_tenths(svg, x);
    svg.append("\"");
    attribute("y", row_y(event.track));
    svg.append(" width=\"");
    detail::svg_append_tenths(svg, w);
    svg.append("\"");
    attribute("height", row_height - 2 * inset);
    svg.append(" fill=\"").append(detail::svg_colour(event.kind)).append("\"/>\n");
  }
  svg.append("</g>\n");

  // Microbatch numbers (or "all-reduce") inside the rectangles wide enough for them.
  svg.append("<g font-size=\"");
  detail::svg_append_pixels(svg, op_font);
  svg.append("\" fill=\"#ffffff\" text-anchor=\"middle\">\n");
  if (op_font >= 6) {
    for (const auto& event : line.events) {
      if (event.track >= tracks) continue;
      const long long x = left_tenths(event.start);
      const long long w = left_tenths(event.end) - x;
      const std::string label =
          event.kind == timeline_kind::gradient_sync ? std::string("all-reduce") : std::to_string(event.microbatch);
      if (static_cast<double>(label.size()) * op_font * 0.62 + 4 > static_cast<double>(w) / 10) continue;
      text_at(static_cast<double>(x) / 10 + static_cast<double>(w) / 20,
              row_y(event.track) + (row_height - 2 * inset) / 2 + op_font * 0.35, label);
    }
  }
  svg.append("</g>\n");

  // Legend: the kinds that occur.
  svg.append("<g font-size=\"12\" fill=\"#222222\">\n");
  double legend_x = plot_left;
  for (std::size_t k = 0; k < kinds_present.size(); ++k) {
    if (!kinds_present[k]) continue;
    const auto kind = static_cast<timeline_kind>(k);
    svg.append("<rect");
    attribute("x", legend_x);
    attribute("y", bottom + 30);
    svg.append(" width=\"12\" height=\"12\" fill=\"").append(detail::svg_colour(kind)).append("\"/>\n");
    const std::string_view label = detail::svg_legend_label(kind);
    text_at(legend_x + 17, bottom + 40, label);
    legend_x += 17 + static_cast<double>(label.size()) * label_char_width + 20;
  }
  svg.append("</g>\n</svg>\n");
  return svg;
}

//! Writes `render_svg_timeline(line, options)` to `path`; throws `input_error`
//! naming the path when it cannot be written.
inline void write_svg_timeline(const timeline& line, const std::string& path, const svg_options& options = {}) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw input_error(path, 0, "cannot open file for writing");
  out << render_svg_timeline(line, options);
  out.flush();
  if (!out) throw input_error(path, 0, "write failed");
}

}  // namespace dflop
