// SPDX-License-Identifier: Apache-2.0
//! \file
//! Samples from Python values: a `dflop.Samples` passes through untouched; a
//! trace path is read with the library's JSONL reader; dicts, `Sample`s and
//! columns are converted field by field with the trace's rules (integral
//! numbers only, a known modality, a self-consistent sample, unique ids), so a
//! list of dicts is accepted exactly when the same samples written as a trace
//! would be. Errors are `input_error(SOURCE, POSITION, REASON)`, POSITION the
//! 1-based record number.
#pragma once

#include "common.hpp"

#include <dflop/error.hpp>
#include <dflop/workload/sample.hpp>
#include <dflop/workload/trace.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace dflop::python {

namespace detail {

//! "int 3", "str 'x'", "float 2.5": what a wrong value was, for messages.
inline std::string describe_value(py::handle value) {
  return std::string(Py_TYPE(value.ptr())->tp_name) + " " + py::repr(value).cast<std::string>();
}

//! Integer field `name` of `record`: Python or NumPy integers, integral floats;
//! not booleans, fractions, strings or values beyond int64 (the trace's rules).
inline std::int64_t integer_field(py::dict record, const char* name, const std::string& source, std::size_t line) {
  if (!record.contains(name)) throw input_error(source, line, std::string("missing field '") + name + "'");
  py::handle value = record[name];
  const auto wrong = [&] {
    return input_error(source, line,
                       std::string("field '") + name + "' must be an integer, found " + describe_value(value));
  };
  if (PyBool_Check(value.ptr())) throw wrong();
  if (PyFloat_Check(value.ptr())) {
    const double number = PyFloat_AsDouble(value.ptr());
    if (std::isfinite(number) && std::trunc(number) == number && std::abs(number) < 9223372036854775808.0)
      return static_cast<std::int64_t>(number);
    throw wrong();
  }
  if (!PyIndex_Check(value.ptr())) throw wrong();
  const py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long result = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0)
    throw input_error(source, line, std::string("field '") + name + "' is out of range: " + describe_value(value));
  return result;
}

//! The modality a record names, or an error listing the known ones.
inline modality modality_named(py::handle value, const std::string& source, std::size_t line) {
  if (!py::isinstance<py::str>(value))
    throw input_error(source, line, "field 'modality' must be a string, found " + describe_value(value));
  const auto text = value.cast<std::string>();
  if (const auto kind = parse_modality(text)) return *kind;
  std::string reason = "unknown modality \"" + text + "\" (known:";
  for (modality known : all_modalities) reason.append(" ").append(to_string(known));
  throw input_error(source, line, reason.append(")"));
}

//! Throws when `s` is not self-consistent (`find_inconsistency`), naming it.
inline void check_sample(const sample& s, const std::string& source, std::size_t line) {
  if (auto problem = find_inconsistency(s)) throw input_error(source, line, "sample \"" + s.id + "\": " + *problem);
}

//! One record (a dict with the trace's fields; `id` optional, default the
//! 0-based position). Extra keys are ignored, as in a trace.
inline sample sample_from_record(py::dict record, const std::string& source, std::size_t line) {
  sample result;
  if (record.contains("id")) {
    py::handle id = record["id"];
    if (py::isinstance<py::str>(id))
      result.id = id.cast<std::string>();
    else if (!PyBool_Check(id.ptr()) && PyIndex_Check(id.ptr()))
      result.id = py::str(id).cast<std::string>();
    else
      throw input_error(source, line, "field 'id' must be a string or an integer, found " + describe_value(id));
  } else {
    result.id = std::to_string(line - 1);
  }
  if (!record.contains("modality")) throw input_error(source, line, "missing field 'modality'");
  result.kind = modality_named(record["modality"], source, line);
  result.encoder_items = integer_field(record, "encoder_items", source, line);
  result.encoder_tokens = integer_field(record, "encoder_tokens", source, line);
  result.llm_tokens = integer_field(record, "llm_tokens", source, line);
  check_sample(result, source, line);
  return result;
}

//! Remembers ids and rejects a repeat, naming the first position (as the trace reader does).
class id_checker {
public:
  explicit id_checker(std::string source) : source_(std::move(source)) {}
  void add(const std::string& id, std::size_t line) {
    const auto [first, inserted] = first_line_.try_emplace(id, line);
    if (!inserted)
      throw input_error(source_, line,
                        "duplicate id \"" + id + "\" (first seen at " + std::to_string(first->second) + ")");
  }

private:
  std::string source_;
  std::unordered_map<std::string, std::size_t> first_line_;
};

}  // namespace detail

//! Samples from an iterable of dicts or `Sample`s; `source` names it in errors.
inline sample_list samples_from_records(py::iterable records, const std::string& source) {
  sample_list result;
  if (py::hasattr(records, "__len__")) result.reserve(py::len(records));
  detail::id_checker ids(source);
  std::size_t line = 0;
  for (py::handle item : records) {
    ++line;
    if (py::isinstance<sample>(item)) {
      result.push_back(item.cast<const sample&>());
      detail::check_sample(result.back(), source, line);
    } else if (py::isinstance<py::dict>(item)) {
      result.push_back(detail::sample_from_record(py::reinterpret_borrow<py::dict>(item), source, line));
    } else {
      throw input_error(source, line, "expected a dict or a dflop.Sample, found " + detail::describe_value(item));
    }
    ids.add(result.back().id, line);
  }
  return result;
}

//! The samples `value` denotes: a `Samples` (returned as is, not copied), a
//! path to a JSONL trace (str or os.PathLike), or an iterable of `Sample`s or
//! dicts. Anything but a `Samples` is converted into `storage`; `argument`
//! names the parameter in errors of in-memory records.
inline const sample_list& as_samples(py::handle value, sample_list& storage, const char* argument) {
  if (py::isinstance<sample_list>(value)) return value.cast<const sample_list&>();
  if (py::isinstance<py::str>(value) || py::hasattr(value, "__fspath__")) {
    const auto path = py::module_::import("os").attr("fspath")(value).cast<std::string>();
    storage = read_trace_file(path);
    return storage;
  }
  if (!py::isinstance<py::iterable>(value) || py::isinstance<py::dict>(value))
    throw py::type_error(std::string(argument) + ": expected dflop.Samples, a trace path or a list of dicts or "
                         "dflop.Sample, found " + detail::describe_value(value));
  storage = samples_from_records(py::reinterpret_borrow<py::iterable>(value), argument);
  return storage;
}

}  // namespace dflop::python
