// SPDX-License-Identifier: Apache-2.0
//! \file
//! A small reader for the comma-separated tables dflop takes as input (costs,
//! profiles). Every field remembers its line, so any later rejection can name
//! the file, the line and the column. No quoting: dflop's tables hold ids and
//! numbers only, and a quote character is reported rather than misread.
#pragma once

#include <dflop/error.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <istream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace dflop {

//! One data row of a CSV table: its fields and its 1-based line in the source.
struct csv_row {
  std::vector<std::string> fields;  //!< one per header column, whitespace-trimmed
  std::size_t line = 0;             //!< 1-based line number in the source
};

//! A CSV table: a header row naming the columns, then data rows of the same width.
struct csv_table {
  std::string source;                //!< file name (or a description), used in errors
  std::vector<std::string> columns;  //!< header names, in order
  std::vector<csv_row> rows;         //!< data rows (blank lines skipped)

  //! Index of `name` among the columns, or nullopt.
  [[nodiscard]] std::optional<std::size_t> find_column(std::string_view name) const {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return i;
    return std::nullopt;
  }

  //! Index of `name` among the columns; throws `input_error` naming the header line when missing.
  [[nodiscard]] std::size_t require_column(std::string_view name) const {
    if (auto index = find_column(name)) return *index;
    std::string have;
    for (const auto& column : columns) have += (have.empty() ? "" : ", ") + column;
    throw input_error(source, 1, "missing column '" + std::string(name) + "' (columns: " + have + ")");
  }

  //! The field of `row` in column `column` as a finite double; throws `input_error`
  //! naming line and column when it is not a number. `non_negative` also rejects values < 0.
  [[nodiscard]] double number(const csv_row& row, std::size_t column, bool non_negative = true) const {
    const std::string& text = row.fields[column];
    double value = 0;
    const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || status != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
      throw input_error(source, row.line, "column '" + columns[column] + "': '" + text + "' is not a finite number");
    if (non_negative && value < 0)
      throw input_error(source, row.line, "column '" + columns[column] + "': negative value " + text);
    return value;
  }

  //! The field of `row` in column `column` as an integer; throws `input_error` when it is not one.
  [[nodiscard]] long long integer(const csv_row& row, std::size_t column, bool non_negative = true) const {
    const std::string& text = row.fields[column];
    long long value = 0;
    const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || status != std::errc{} || end != text.data() + text.size())
      throw input_error(source, row.line, "column '" + columns[column] + "': '" + text + "' is not an integer");
    if (non_negative && value < 0)
      throw input_error(source, row.line, "column '" + columns[column] + "': negative value " + text);
    return value;
  }
};

namespace detail {

inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

inline std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    fields.emplace_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

}  // namespace detail

//! Reads a CSV table from a stream. Throws `input_error` (naming `source` and the
//! line) for an empty input, an empty or duplicate column name, a quote
//! character, or a row whose field count differs from the header's.
[[nodiscard]] inline csv_table read_csv(std::istream& in, std::string source) {
  csv_table table;
  table.source = std::move(source);
  std::string line;
  std::size_t line_number = 0;
  bool have_header = false;
  while (std::getline(in, line)) {
    ++line_number;
    if (detail::trim(line).empty()) continue;
    if (line.find('"') != std::string::npos)
      throw input_error(table.source, line_number, "quoted fields are not supported");
    auto fields = detail::split_csv_line(line);
    if (!have_header) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (fields[i].empty())
          throw input_error(table.source, line_number, "header column " + std::to_string(i + 1) + " has no name");
        for (std::size_t j = 0; j < i; ++j)
          if (fields[j] == fields[i])
            throw input_error(table.source, line_number, "duplicate column '" + fields[i] + "'");
      }
      table.columns = std::move(fields);
      have_header = true;
      continue;
    }
    if (fields.size() != table.columns.size())
      throw input_error(table.source, line_number,
                        "expected " + std::to_string(table.columns.size()) + " fields (as the header), found " +
                            std::to_string(fields.size()));
    table.rows.push_back({std::move(fields), line_number});
  }
  if (!have_header) throw input_error(table.source, 0, "empty input: expected a header row");
  return table;
}

//! Reads a CSV table from a file; throws `input_error` when it cannot be opened.
[[nodiscard]] inline csv_table read_csv_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(path, 0, "cannot open file for reading");
  return read_csv(in, path);
}

//! Reads a CSV table from a string (tests, embedded tables).
[[nodiscard]] inline csv_table read_csv_text(std::string_view text, std::string source = "<text>") {
  std::istringstream in{std::string(text)};
  return read_csv(in, std::move(source));
}

}  // namespace dflop
