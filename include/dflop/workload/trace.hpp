// SPDX-License-Identifier: Apache-2.0
//! \file
//! Workload traces as JSON Lines: one sample per line, an object with exactly
//! the fields `id` (string or integer), `modality`, `encoder_items`,
//! `encoder_tokens` and `llm_tokens`. Extra fields are ignored; blank lines are
//! skipped. Every rejection is an `input_error` naming the source, the line and
//! the reason, so a user can fix a trace of millions of lines.
//!
//! \code{.jsonl}
//! {"id":"s000000","modality":"image","encoder_items":10,"encoder_tokens":7290,"llm_tokens":7300}
//! {"id":17,"modality":"text","encoder_items":0,"encoder_tokens":0,"llm_tokens":512,"source":"ignored"}
//! \endcode
#pragma once

#include <dflop/error.hpp>
#include <dflop/workload/sample.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dflop {

namespace detail {

//! The JSON type name a user would recognise, for "wrong type" messages.
inline std::string json_kind(const nlohmann::json& value) {
  if (value.is_number_float()) return "number " + value.dump();
  if (value.is_number()) return "integer " + value.dump();
  if (value.is_string()) return "string " + value.dump();
  return std::string(value.type_name());
}

//! Reads integer field `name` of `object`; integral floats (e.g. 3.0) are accepted,
//! fractional ones, strings, booleans and out-of-range values are rejected.
inline std::int64_t read_integer_field(const nlohmann::json& object, const char* name, const std::string& source,
                                       std::size_t line) {
  const auto found = object.find(name);
  if (found == object.end()) throw input_error(source, line, std::string("missing field '") + name + "'");
  const nlohmann::json& value = *found;
  std::string reason;
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<std::int64_t>();
  if (value.is_number_unsigned()) {
    if (value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(value.get<std::uint64_t>());
    reason.append("field '").append(name).append("' is out of range: ").append(value.dump());
    throw input_error(source, line, reason);
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    // 2^63 is the first double beyond int64's range.
    if (std::isfinite(number) && std::trunc(number) == number && std::abs(number) < 9223372036854775808.0)
      return static_cast<std::int64_t>(number);
  }
  reason.append("field '").append(name).append("' must be an integer, found ").append(json_kind(value));
  throw input_error(source, line, reason);
}

}  // namespace detail

//! Parses one trace line (already known not to be blank) into a self-consistent
//! sample. Throws `input_error(source, line, reason)` for invalid JSON, a
//! non-object, a missing field, a wrong type, an unknown modality or an
//! inconsistent sample (see `find_inconsistency`).
[[nodiscard]] inline sample parse_trace_line(std::string_view text, const std::string& source, std::size_t line) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& parse_failure) {
    // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 23: REASON";
    // the line is ours to give, so keep "at column 23: REASON".
    std::string message = parse_failure.what();
    const std::string_view marker = "parse error at line 1, ";
    std::string reason = "invalid JSON";
    if (const auto found = message.find(marker); found != std::string::npos)
      reason.append(" at ").append(message, found + marker.size());
    else if (const auto bracket = message.find("] "); bracket != std::string::npos)
      reason.append(": ").append(message, bracket + 2);
    else
      reason.append(": ").append(message);
    throw input_error(source, line, reason);
  } catch (const nlohmann::json::exception& value_failure) {
    // Valid syntax, but a value no number type holds ("number overflow parsing '1e999'").
    std::string message = value_failure.what();
    if (const auto bracket = message.find("] "); bracket != std::string::npos) message.erase(0, bracket + 2);
    throw input_error(source, line, "invalid JSON: " + message);
  }
  if (!object.is_object())
    throw input_error(source, line, "expected a JSON object, found " + detail::json_kind(object));

  sample result;
  const auto id = object.find("id");
  if (id == object.end()) throw input_error(source, line, "missing field 'id'");
  if (id->is_string())
    result.id = id->get<std::string>();
  else if (id->is_number_unsigned())
    result.id = std::to_string(id->get<std::uint64_t>());
  else if (id->is_number_integer())
    result.id = std::to_string(id->get<std::int64_t>());
  else
    throw input_error(source, line, "field 'id' must be a string or an integer, found " + detail::json_kind(*id));

  const auto kind = object.find("modality");
  if (kind == object.end()) throw input_error(source, line, "missing field 'modality'");
  if (!kind->is_string())
    throw input_error(source, line, "field 'modality' must be a string, found " + detail::json_kind(*kind));
  const auto& kind_text = kind->get_ref<const std::string&>();
  const auto parsed_kind = parse_modality(kind_text);
  if (!parsed_kind) {
    std::string reason = "unknown modality \"" + kind_text + "\" (known:";
    for (modality known : all_modalities) reason.append(" ").append(to_string(known));
    reason.append(")");
    throw input_error(source, line, reason);
  }
  result.kind = *parsed_kind;
  result.encoder_items = detail::read_integer_field(object, "encoder_items", source, line);
  result.encoder_tokens = detail::read_integer_field(object, "encoder_tokens", source, line);
  result.llm_tokens = detail::read_integer_field(object, "llm_tokens", source, line);
  if (auto problem = find_inconsistency(result)) {
    std::string reason = "sample \"" + result.id + "\": ";
    reason.append(*problem);
    throw input_error(source, line, reason);
  }
  return result;
}

//! Reads a trace one sample at a time, so a caller can stream a file far larger
//! than memory. Duplicate ids are detected only when `check_duplicate_ids` is set,
//! because remembering every id needs memory proportional to the trace.
class trace_reader {
public:
  //! \param in the stream to read (must outlive the reader)
  //! \param source file name or description used in errors
  //! \param check_duplicate_ids reject a repeated id, naming the line of its first occurrence
  trace_reader(std::istream& in, std::string source, bool check_duplicate_ids = true)
      : in_(&in), source_(std::move(source)), check_duplicate_ids_(check_duplicate_ids) {}

  //! The next sample, or nullopt at the end of the stream; throws `input_error` on a bad line.
  [[nodiscard]] std::optional<sample> next() {
    std::string text;
    while (std::getline(*in_, text)) {
      ++line_;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      sample result = parse_trace_line(text, source_, line_);
      if (check_duplicate_ids_) {
        const auto [first, inserted] = first_line_of_id_.try_emplace(result.id, line_);
        if (!inserted)
          throw input_error(source_, line_,
                            "duplicate id \"" + result.id + "\" (first seen on line " + std::to_string(first->second) +
                                ")");
      }
      return result;
    }
    if (in_->bad()) throw input_error(source_, line_, "read error");
    return std::nullopt;
  }

  //! 1-based line of the sample `next()` returned last (0 before the first).
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  //! The name used in errors.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

private:
  std::istream* in_;
  std::string source_;
  bool check_duplicate_ids_;
  std::size_t line_ = 0;
  std::unordered_map<std::string, std::size_t> first_line_of_id_;
};

//! Reads a whole trace from a stream, validating every line and rejecting duplicate ids.
[[nodiscard]] inline std::vector<sample> read_trace(std::istream& in, std::string source = "<stream>") {
  trace_reader reader(in, std::move(source));
  std::vector<sample> samples;
  while (auto next = reader.next()) samples.push_back(std::move(*next));
  return samples;
}

//! Reads a whole trace from a file; throws `input_error` when it cannot be opened.
[[nodiscard]] inline std::vector<sample> read_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(path, 0, "cannot open file for reading");
  return read_trace(in, path);
}

//! Reads a whole trace from a string (tests, embedded traces).
[[nodiscard]] inline std::vector<sample> read_trace_text(std::string_view text, std::string source = "<text>") {
  std::istringstream in{std::string(text)};
  return read_trace(in, std::move(source));
}

//! One trace line for `s` (no newline), fields in the documented order, `id` as a string.
[[nodiscard]] inline std::string to_trace_line(const sample& s) {
  nlohmann::ordered_json object;
  object["id"] = s.id;
  object["modality"] = std::string(to_string(s.kind));
  object["encoder_items"] = s.encoder_items;
  object["encoder_tokens"] = s.encoder_tokens;
  object["llm_tokens"] = s.llm_tokens;
  return object.dump();
}

//! Writes `samples` as JSON Lines. The writer does not validate: `read_trace` does.
inline void write_trace(std::ostream& out, std::span<const sample> samples) {
  for (const sample& s : samples) out << to_trace_line(s) << '\n';
}

//! Writes `samples` as JSON Lines to `path`; throws `input_error` when it cannot be written.
inline void write_trace_file(const std::string& path, std::span<const sample> samples) {
  std::ofstream out(path);
  if (!out) throw input_error(path, 0, "cannot open file for writing");
  write_trace(out, samples);
  out.flush();
  if (!out) throw input_error(path, 0, "write failed");
}

}  // namespace dflop
