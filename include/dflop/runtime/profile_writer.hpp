// SPDX-License-Identifier: Apache-2.0
//! \file
//! Writes a `profile` as the CSV that `read_profile` (cost/profile.hpp) reads:
//! `module,tp,tokens|items,forward_ms,backward_ms[,memory_mib]`, one row per
//! point, curves in order. Numbers are written in their shortest exact form, so
//! reading the file back gives the same profile up to the ms <-> s conversion.
#pragma once

#include <dflop/cost/profile.hpp>
#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>

#include <charconv>
#include <cmath>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>

namespace dflop {

namespace detail {

//! `value` in the shortest form that reads back to the same double.
inline void write_shortest(std::ostream& out, double value) {
  char text[64];
  const auto [end, status] = std::to_chars(text, text + sizeof text, value);
  out.write(text, status == std::errc{} ? end - text : 0);
}

}  // namespace detail

//! Writes `table` as profile CSV to `out`. The `memory_mib` column is written when
//! every point has activation bytes. \throws dflop::error naming the curve and the
//! size when the table could not be read back: no points, a curve whose size kind
//! differs from the table's, an LLM part in an `items` table, a non-finite or
//! non-positive size, a negative or non-finite time, or memory on some points only.
inline void write_profile(std::ostream& out, const profile& table) {
  bool any_memory = false, all_memory = true, any_point = false;
  for (const auto& curve : table.curves) {
    const std::string where = "write_profile: '" + std::string(part_name(curve.piece.kind, curve.piece.part)) +
                              "' at tp " + std::to_string(curve.tp);
    if (curve.size != table.size)
      throw error(where + " counts " + std::string(to_string(curve.size)) + " but the table's size column is " +
                  std::string(to_string(table.size)));
    if (table.size == profile_size::items && curve.piece.kind == module_kind::llm)
      throw error(where + ": an LLM part needs a 'tokens' size column, not 'items'");
    if (curve.tp < 1) throw error(where + ": TP degree must be >= 1");
    for (const auto& point : curve.points) {
      any_point = true;
      if (!std::isfinite(point.size) || !(point.size > 0))
        throw error(where + ": size " + std::to_string(point.size) + " must be finite and > 0");
      if (!std::isfinite(point.forward_seconds) || point.forward_seconds < 0 ||
          !std::isfinite(point.backward_seconds) || point.backward_seconds < 0)
        throw error(where + ", size " + std::to_string(point.size) + ": times must be finite and >= 0");
      if (point.activation_bytes && (!std::isfinite(*point.activation_bytes) || *point.activation_bytes < 0))
        throw error(where + ", size " + std::to_string(point.size) + ": activation bytes must be finite and >= 0");
      any_memory = any_memory || point.activation_bytes.has_value();
      all_memory = all_memory && point.activation_bytes.has_value();
    }
  }
  if (!any_point) throw error("write_profile: the profile has no points (a profile CSV needs at least one row)");
  if (any_memory && !all_memory)
    throw error("write_profile: some points have activation memory and some do not; the memory_mib column "
                "must cover every row (measure memory for every part or for none)");

  out << "module,tp," << to_string(table.size) << ",forward_ms,backward_ms" << (all_memory ? ",memory_mib" : "")
      << "\n";
  for (const auto& curve : table.curves)
    for (const auto& point : curve.points) {
      out << part_name(curve.piece.kind, curve.piece.part) << ',' << curve.tp << ',';
      detail::write_shortest(out, point.size);
      out << ',';
      detail::write_shortest(out, point.forward_seconds * 1e3);
      out << ',';
      detail::write_shortest(out, point.backward_seconds * 1e3);
      if (all_memory) {
        out << ',';
        detail::write_shortest(out, *point.activation_bytes / 1048576.0);
      }
      out << '\n';
    }
}

//! `write_profile` into a string.
[[nodiscard]] inline std::string profile_csv(const profile& table) {
  std::ostringstream out;
  write_profile(out, table);
  return out.str();
}

//! Writes `table` to the file `path`. \throws input_error naming the path when it cannot be written.
inline void write_profile_file(const std::string& path, const profile& table) {
  const std::string text = profile_csv(table);
  std::ofstream out(path);
  if (!out) throw input_error(path, 0, "cannot open file for writing");
  out << text;
  out.flush();
  if (!out) throw input_error(path, 0, "writing the profile failed");
}

}  // namespace dflop
