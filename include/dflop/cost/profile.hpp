// SPDX-License-Identifier: Apache-2.0
//! \file
//! Profiled module costs read from CSV: one curve of (size, forward, backward[,
//! memory]) points per module part and TP degree. Input of `table_cost_model`
//! and `fitted_cost_model`.
//!
//! Columns (any order; no others):
//! - `module`: `encoder`, `llm` (one layer), `encoder_embedding`, `projector`,
//!   `llm_embedding`, `lm_head` (the parts; see `part_name`);
//! - `tp`: TP degree, integer >= 1;
//! - exactly one size column: `tokens` (microbatch tokens: LLM rows one packed
//!   sequence of that length; encoder rows that many tokens in whole items) or
//!   `items` (encoder rows only: that many tiles/frames); > 0;
//! - `forward_ms`, `backward_ms`: measured times per GPU, milliseconds, >= 0;
//! - optional `memory_mib`: activation memory of that part for that microbatch, MiB.
//! A (module, tp, size) appears once. Errors are `input_error(file, line, reason)`.
#pragma once

#include <dflop/error.hpp>
#include <dflop/model/module_kind.hpp>
#include <dflop/util/csv.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace dflop {

//! What a profile's size column counts.
enum class profile_size : std::uint8_t {
  tokens,  //!< tokens of the microbatch in that module
  items,   //!< encoder items (tiles, frames) of the microbatch
};

//! "tokens" or "items".
[[nodiscard]] constexpr std::string_view to_string(profile_size size) noexcept {
  return size == profile_size::tokens ? "tokens" : "items";
}

inline std::ostream& operator<<(std::ostream& out, profile_size size) { return out << to_string(size); }

//! One profiled row.
struct profile_point {
  double size = 0;                              //!< tokens or items
  double forward_seconds = 0;                   //!< forward time
  double backward_seconds = 0;                  //!< backward time
  std::optional<double> activation_bytes;       //!< from `memory_mib`, when the table has it
  std::size_t line = 0;                         //!< 1-based line in the source

  friend bool operator==(const profile_point&, const profile_point&) = default;
};

//! All rows of one module part at one TP degree, in file order.
struct profile_curve {
  module_piece piece;                 //!< module and part
  int tp = 1;                         //!< TP degree
  profile_size size = profile_size::tokens;  //!< what `profile_point::size` counts
  std::vector<profile_point> points;  //!< the rows
  std::string source;                 //!< file it came from

  friend bool operator==(const profile_curve&, const profile_curve&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const profile_curve& curve) {
  return out << "profile_curve{" << curve.piece << ", tp=" << curve.tp << ", size=" << curve.size
             << ", points=" << curve.points.size() << ", source=" << curve.source << "}";
}

//! One profile table.
struct profile {
  std::string source;                  //!< file name
  profile_size size = profile_size::tokens;  //!< the table's size column
  std::vector<profile_curve> curves;   //!< one per (module part, tp), in order of first row

  friend bool operator==(const profile&, const profile&) = default;
};

//! Reads a profile from a parsed CSV table (format in the file comment).
[[nodiscard]] inline profile read_profile(const csv_table& table) {
  const std::vector<std::string_view> allowed{"module", "tp", "tokens", "items", "forward_ms", "backward_ms",
                                              "memory_mib"};
  for (const auto& column : table.columns) {
    bool known = false;
    for (auto name : allowed) known = known || column == name;
    if (!known)
      throw input_error(table.source, 1,
                        "unknown column '" + column +
                            "' (expected module, tp, tokens or items, forward_ms, backward_ms, optional memory_mib)");
  }
  const auto tokens = table.find_column("tokens");
  const auto items = table.find_column("items");
  if (tokens && items) throw input_error(table.source, 1, "both 'tokens' and 'items' columns: a profile has one size column");
  if (!tokens && !items) throw input_error(table.source, 1, "missing size column: 'tokens' or 'items'");
  profile result;
  result.source = table.source;
  result.size = tokens ? profile_size::tokens : profile_size::items;
  const std::size_t size_column = tokens ? *tokens : *items;
  const std::size_t module_column = table.require_column("module");
  const std::size_t tp_column = table.require_column("tp");
  const std::size_t forward_column = table.require_column("forward_ms");
  const std::size_t backward_column = table.require_column("backward_ms");
  const auto memory_column = table.find_column("memory_mib");
  if (table.rows.empty()) throw input_error(table.source, 0, "no data rows");

  for (const csv_row& row : table.rows) {
    const std::string& name = row.fields[module_column];
    const auto piece = parse_part_name(name);
    if (!piece)
      throw input_error(table.source, row.line,
                        "column 'module': unknown part '" + name +
                            "' (known: encoder, encoder_embedding, projector, llm, llm_embedding, lm_head)");
    if (result.size == profile_size::items && piece->kind == module_kind::llm)
      throw input_error(table.source, row.line,
                        "column 'module': LLM part '" + name + "' needs a 'tokens' size column, not 'items'");
    const long long tp = table.integer(row, tp_column);
    if (tp < 1 || tp > 1024)
      throw input_error(table.source, row.line, "column 'tp': TP degree " + std::to_string(tp) + " is not in [1, 1024]");
    profile_point point;
    point.size = table.number(row, size_column);
    if (!(point.size > 0))
      throw input_error(table.source, row.line, "column '" + table.columns[size_column] + "': size must be > 0");
    point.forward_seconds = table.number(row, forward_column) / 1e3;
    point.backward_seconds = table.number(row, backward_column) / 1e3;
    if (memory_column) point.activation_bytes = table.number(row, *memory_column) * 1048576.0;
    point.line = row.line;

    profile_curve* curve = nullptr;
    for (auto& existing : result.curves)
      if (existing.piece == *piece && existing.tp == tp) curve = &existing;
    if (!curve) {
      result.curves.push_back({*piece, static_cast<int>(tp), result.size, {}, table.source});
      curve = &result.curves.back();
    }
    for (const auto& other : curve->points)
      if (other.size == point.size)
        throw input_error(table.source, row.line,
                          "duplicate row for module '" + name + "', tp " + std::to_string(tp) + ", " +
                              table.columns[size_column] + " " + row.fields[size_column] + " (first on line " +
                              std::to_string(other.line) + ")");
    curve->points.push_back(point);
  }
  return result;
}

//! Reads a profile CSV file.
[[nodiscard]] inline profile read_profile_file(const std::string& path) { return read_profile(read_csv_file(path)); }

//! Reads a profile from CSV text (tests, embedded tables).
[[nodiscard]] inline profile read_profile_text(std::string_view text, std::string source = "<text>") {
  return read_profile(read_csv_text(text, std::move(source)));
}

namespace detail {

//! Finds the curve of `piece` at `tp` among `curves` (anything with `.piece` and `.tp`).
//! Returns nullptr when the part was profiled at no TP degree (it then costs 0);
//! throws `dflop::error` naming the profiled degrees when it was, but not at `tp`,
//! and when a module's layers were never profiled.
template <class Curve>
[[nodiscard]] const Curve* find_curve(const std::vector<Curve>& curves, module_piece piece, int tp,
                                      std::string_view model_name) {
  std::string degrees;
  for (const auto& curve : curves) {
    if (!(curve.piece == piece)) continue;
    if (curve.tp == tp) return &curve;
    degrees.append(degrees.empty() ? "" : ", ").append(std::to_string(curve.tp));
  }
  if (degrees.empty() && piece.part != module_part::layer) return nullptr;
  std::string message;
  message.append(model_name).append(": no profile for '").append(part_name(piece.kind, piece.part))
      .append("' at tp ").append(std::to_string(tp)).append(" (profiled tp: ")
      .append(degrees.empty() ? std::string("none") : degrees).append(")");
  throw error(message);
}

}  // namespace detail

}  // namespace dflop
