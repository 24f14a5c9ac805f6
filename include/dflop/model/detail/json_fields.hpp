// SPDX-License-Identifier: Apache-2.0
//! \file
//! Strict reading of small JSON spec files: parse errors carry the line, field
//! errors name the field path, unknown fields are rejected (a typo must not
//! silently fall back to a default).
#pragma once

#include <algorithm>
#include <dflop/error.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

namespace dflop::detail {

//! Parses `text`; a syntax error becomes `input_error(source, line, reason)`.
[[nodiscard]] inline nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::size_t line = 1;
    const std::size_t end = e.byte == 0 ? 0 : std::min<std::size_t>(e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i)
      if (text[i] == '\n') ++line;
    std::string reason = e.what();
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line L, column C: ..."
    if (const auto colon = reason.find("]"); colon != std::string::npos) reason = reason.substr(colon + 2);
    throw input_error(source, line, "invalid JSON: " + reason);
  } catch (const nlohmann::json::exception& e) {
    // Not a syntax error but a value JSON allows and no number type holds
    // ("number overflow parsing '1e999'"): its line is where the number is.
    std::string reason = e.what();
    if (const auto bracket = reason.find("] "); bracket != std::string::npos) reason = reason.substr(bracket + 2);
    std::size_t line = 0;
    if (const auto open = reason.find('\''), close = reason.rfind('\''); open != std::string::npos && close > open)
      if (const auto at = text.find(reason.substr(open + 1, close - open - 1)); at != std::string_view::npos)
        line = 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    throw input_error(source, line, "invalid JSON: " + reason);
  }
}

//! Reads a whole file; `input_error` when it cannot be opened.
[[nodiscard]] inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path, 0, "cannot open file for reading");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

//! `number` as JSON writes it (0, 0.5, 1e-06), for messages.
[[nodiscard]] inline std::string json_number_text(double number) { return nlohmann::json(number).dump(); }

//! Typed access to the fields of one JSON object, with errors naming `prefix.field`.
class json_fields {
public:
  json_fields(const nlohmann::json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
    if (!object_.is_object()) fail(prefix_.empty() ? std::string("top level") : prefix_, "expected a JSON object");
  }

  //! Rejects any key not in `known`.
  void only(std::initializer_list<std::string_view> known) const {
    for (const auto& item : object_.items()) {
      bool found = false;
      for (auto name : known) found = found || item.key() == name;
      if (!found) {
        std::string list;
        for (auto name : known) list.append(list.empty() ? "" : ", ").append(name);
        fail(path(item.key()), "unknown field (expected one of: " + list + ")");
      }
    }
  }

  [[nodiscard]] bool has(std::string_view key) const { return object_.contains(key); }
  [[nodiscard]] const nlohmann::json& at(std::string_view key) const {
    if (!has(key)) fail(path(key), "missing required field");
    return object_.find(key).value();
  }

  //! A required string.
  [[nodiscard]] std::string text(std::string_view key) const {
    const auto& value = at(key);
    if (!value.is_string()) fail(path(key), "expected a string, got " + value.dump());
    return value.get<std::string>();
  }

  //! A required positive integer (a JSON number with no fraction).
  [[nodiscard]] std::int64_t positive_integer(std::string_view key) const {
    const auto& value = at(key);
    if (value.is_number_integer()) {
      const auto number = value.get<std::int64_t>();
      if (number > 0 && !(value.is_number_unsigned() && value.get<std::uint64_t>() >
                                                            static_cast<std::uint64_t>(
                                                                std::numeric_limits<std::int64_t>::max())))
        return number;
    }
    fail(path(key), "expected a positive integer, got " + value.dump());
  }

  //! A required finite number > 0.
  [[nodiscard]] double positive_number(std::string_view key) const {
    const auto& value = at(key);
    if (value.is_number()) {
      const auto number = value.get<double>();
      if (std::isfinite(number) && number > 0) return number;
    }
    fail(path(key), "expected a positive number, got " + value.dump());
  }

  //! A required integer in [`minimum`, `maximum`] (a JSON number with no fraction).
  [[nodiscard]] std::int64_t integer_in(std::string_view key, std::int64_t minimum,
                                        std::int64_t maximum = std::numeric_limits<std::int64_t>::max()) const {
    const auto& value = at(key);
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      const auto number = value.get<std::int64_t>();
      if (number >= minimum && number <= maximum) return number;
    } else if (value.is_number_unsigned() && minimum >= 0 &&
               value.get<std::uint64_t>() >= static_cast<std::uint64_t>(minimum) &&
               value.get<std::uint64_t>() <= static_cast<std::uint64_t>(maximum)) {
      // nlohmann reads every non-negative integer as unsigned: both bounds are checked here too (a 0 once passed a minimum of 1).
      return static_cast<std::int64_t>(value.get<std::uint64_t>());
    }
    std::string expected = "expected an integer >= " + std::to_string(minimum);
    if (maximum != std::numeric_limits<std::int64_t>::max()) expected += " and <= " + std::to_string(maximum);
    fail(path(key), expected + ", got " + value.dump());
  }

  //! A required unsigned 64-bit integer (seeds).
  [[nodiscard]] std::uint64_t unsigned_integer(std::string_view key) const {
    const auto& value = at(key);
    if (value.is_number_unsigned()) return value.get<std::uint64_t>();
    if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
      return static_cast<std::uint64_t>(value.get<std::int64_t>());
    fail(path(key), "expected an integer >= 0, got " + value.dump());
  }

  //! A required finite number >= `minimum`.
  [[nodiscard]] double number_at_least(std::string_view key, double minimum) const {
    const auto& value = at(key);
    if (value.is_number()) {
      const auto number = value.get<double>();
      if (std::isfinite(number) && number >= minimum) return number;
    }
    fail(path(key), "expected a finite number >= " + json_number_text(minimum) + ", got " + value.dump());
  }

  //! A required boolean.
  [[nodiscard]] bool boolean(std::string_view key) const {
    const auto& value = at(key);
    if (!value.is_boolean()) fail(path(key), "expected true or false, got " + value.dump());
    return value.get<bool>();
  }

  //! A required array.
  [[nodiscard]] const nlohmann::json& array(std::string_view key) const {
    const auto& value = at(key);
    if (!value.is_array()) fail(path(key), "expected a JSON array, got " + value.dump());
    return value;
  }

  //! An optional boolean.
  [[nodiscard]] bool boolean(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& value = at(key);
    if (!value.is_boolean()) fail(path(key), "expected true or false, got " + value.dump());
    return value.get<bool>();
  }

  //! "prefix.key" (or "key" at top level).
  [[nodiscard]] std::string path(std::string_view key) const {
    std::string full = prefix_;
    if (!full.empty()) full.append(".");
    full.append(key);
    return full;
  }

  [[noreturn]] void fail(const std::string& field, const std::string& reason) const {
    std::string message;
    message.append("field '").append(field).append("': ").append(reason);
    throw input_error(source_, 0, message);
  }

  [[nodiscard]] const std::string& source() const noexcept { return source_; }

private:
  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
};

//! True when `name` should be read as a file path rather than a preset name.
[[nodiscard]] inline bool names_json_file(std::string_view name) {
  return name.size() >= 5 && name.substr(name.size() - 5) == ".json";
}

}  // namespace dflop::detail
