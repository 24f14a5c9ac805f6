// SPDX-License-Identifier: Apache-2.0
//! \file
//! Samples and traces in Python: `Sample`, `Samples` (the C++ vector, opaque),
//! `read_trace`, `write_trace`, `generate_mixture`, `statistics`. Statistics
//! come back as the dict `dflop stats --json` prints (less its `workload`
//! field), built by the same code path, so the two agree to the last digit.
#pragma once

#include "common.hpp"
#include "samples.hpp"

#include <dflop/error.hpp>
#include <dflop/workload/mixture.hpp>
#include <dflop/workload/statistics.hpp>
#include <dflop/workload/trace.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dflop::python {

namespace detail {

//! A 1-D int64 column of `rows` entries from a buffer (NumPy array, array('q'), memoryview), read in place.
inline std::span<const std::int64_t> int64_column(const py::buffer_info& info, const char* name, std::size_t rows,
                                                  const std::string& source) {
  if (info.ndim != 1 || info.itemsize != 8 || (info.format != "q" && info.format != "l" && info.format != "<q" &&
                                               info.format != "<l" && info.format != "=q" && info.format != "=l"))
    throw input_error(source, 0, std::string("column '") + name + "' must be a 1-D int64 array, got format '" +
                                     info.format + "' with " + std::to_string(info.ndim) + " dimensions");
  if (static_cast<std::size_t>(info.shape[0]) != rows)
    throw input_error(source, 0, std::string("column '") + name + "' has " + std::to_string(info.shape[0]) +
                                     " rows, column 'modality' has " + std::to_string(rows));
  if (info.strides[0] != 8)
    throw input_error(source, 0, std::string("column '") + name + "' is not contiguous");
  return {static_cast<const std::int64_t*>(info.ptr), rows};
}

//! Samples from columns: `modality` strings, three int64 buffers, optional ids.
inline sample_list samples_from_columns(const py::sequence& kinds, const py::buffer& items, const py::buffer& tokens,
                                        const py::buffer& llm, const py::object& ids, const std::string& source) {
  const std::size_t rows = py::len(kinds);
  const py::buffer_info items_info = items.request(), tokens_info = tokens.request(), llm_info = llm.request();
  const auto item_column = int64_column(items_info, "encoder_items", rows, source);
  const auto token_column = int64_column(tokens_info, "encoder_tokens", rows, source);
  const auto llm_column = int64_column(llm_info, "llm_tokens", rows, source);
  if (!ids.is_none() && py::len(ids) != rows)
    throw input_error(source, 0, "column 'id' has " + std::to_string(py::len(ids)) + " rows, column 'modality' has " +
                                     std::to_string(rows));
  sample_list result(rows);
  id_checker seen(source);
  for (std::size_t row = 0; row < rows; ++row) {
    sample& s = result[row];
    s.id = ids.is_none() ? std::to_string(row) : py::str(ids[py::int_(row)]).cast<std::string>();
    s.kind = modality_named(kinds[row], source, row + 1);
    s.encoder_items = item_column[row];
    s.encoder_tokens = token_column[row];
    s.llm_tokens = llm_column[row];
    check_sample(s, source, row + 1);
    seen.add(s.id, row + 1);
  }
  return result;
}

//! `dflop stats --json` without its `workload` field (tools/cli/command_stats.cpp builds the same).
inline nlohmann::ordered_json statistics_json(std::span<const sample> samples) {
  const workload_statistics statistics = describe_workload(samples);
  // Parts are built apart and moved in: ordered_json keeps its members in a
  // vector, so a reference to one member dangles once another is added.
  nlohmann::ordered_json modalities = nlohmann::ordered_json::object();
  for (modality kind : all_modalities)
    modalities[std::string(to_string(kind))] = {{"count", statistics.count(kind)}, {"share", statistics.share(kind)}};
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  nlohmann::ordered_json histograms = nlohmann::ordered_json::object();
  for (sample_field field : all_sample_fields) {
    const auto& summary = statistics.summary(field);
    const std::string name(to_string(field));
    fields[name] = {{"min", summary.min}, {"mean", summary.mean}, {"p50", summary.p50},
                    {"p90", summary.p90}, {"p99", summary.p99},   {"max", summary.max}};
    auto bins = nlohmann::ordered_json::array();
    for (const auto& bin : log2_histogram(field_values(samples, field)))
      bins.push_back({{"low", bin.low}, {"high", bin.high}, {"count", bin.count}});
    histograms[name] = std::move(bins);
  }
  nlohmann::ordered_json report;
  report["samples"] = statistics.sample_count;
  report["modalities"] = std::move(modalities);
  report["quantiles"] = "nearest-rank";
  report["fields"] = std::move(fields);
  report["histograms_log2"] = std::move(histograms);
  return report;
}

//! JSON text as Python objects (json.loads), so dicts keep the C++ key order and exact doubles.
inline py::object json_to_python(const nlohmann::ordered_json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

//! A sample as the dict a trace line holds.
inline py::dict sample_record(const sample& s) {
  py::dict record;
  record["id"] = s.id;
  record["modality"] = std::string(to_string(s.kind));
  record["encoder_items"] = s.encoder_items;
  record["encoder_tokens"] = s.encoder_tokens;
  record["llm_tokens"] = s.llm_tokens;
  return record;
}

//! Python's index rules: -1 is the last; out of range raises IndexError.
inline std::size_t checked_index(std::int64_t index, std::size_t size) {
  const std::int64_t n = static_cast<std::int64_t>(size);
  if (index < -n || index >= n)
    throw py::index_error("sample index " + std::to_string(index) + " out of range for " + std::to_string(size) +
                          " samples");
  return static_cast<std::size_t>(index < 0 ? index + n : index);
}

}  // namespace detail

//! Adds Sample, Samples, read_trace, read_trace_text, write_trace, generate_mixture, mixture_names, statistics.
inline void bind_workload(py::module_& module) {
  py::class_<sample>(module, "Sample",
                     "One training sample as the planner sees it: id, modality and the sizes that decide its cost.")
      .def(py::init([](std::string id, const std::string& kind, std::int64_t encoder_items, std::int64_t encoder_tokens,
                       std::int64_t llm_tokens) {
             sample s{std::move(id), detail::modality_named(py::str(kind), "Sample", 0), encoder_items,
                      encoder_tokens, llm_tokens};
             detail::check_sample(s, "Sample", 0);
             return s;
           }),
           py::arg("id"), py::arg("modality"), py::arg("encoder_items"), py::arg("encoder_tokens"),
           py::arg("llm_tokens"),
           "A self-consistent sample (trace rules); InputError otherwise. modality: text, image, multi_image, video "
           "or audio.")
      .def_readonly("id", &sample::id, "Unique within a workload.")
      .def_property_readonly(
          "modality", [](const sample& s) { return std::string(to_string(s.kind)); },
          "text, image, multi_image, video or audio.")
      .def_readonly("encoder_items", &sample::encoder_items, "Tiles, images, frames or audio chunks.")
      .def_readonly("encoder_tokens", &sample::encoder_tokens, "Encoder tokens over all items.")
      .def_readonly("llm_tokens", &sample::llm_tokens, "Packed LLM sequence length (image tokens included).")
      .def("to_dict", &detail::sample_record, "The sample as a trace record (dict).")
      .def(py::self == py::self)
      .def("__repr__", [](const sample& s) { return "dflop.Sample(" + to_trace_line(s) + ")"; });

  py::class_<sample_list>(module, "Samples",
                          "A workload or a batch: samples in order, held by the C++ library (passing one to plan() "
                          "or Plan.schedule_batch() copies nothing). Build one from a trace path, a list of dicts "
                          "or Samples, or columns (from_columns).")
      .def(py::init<>(), "No samples.")
      .def(py::init([](py::handle source) {
             sample_list storage;
             const sample_list& samples = as_samples(source, storage, "samples");
             return &samples == &storage ? storage : samples;
           }),
           py::arg("source"),
           "Samples from a JSONL trace path, or an iterable of dicts (trace fields; 'id' optional, default the "
           "0-based position; extra keys ignored) or Sample objects. Bad records raise InputError naming the "
           "1-based position.")
      .def_static(
          "from_records",
          [](py::iterable records, const std::string& source) { return samples_from_records(records, source); },
          py::arg("records"), py::arg("source") = "records",
          "Samples from dicts or Sample objects; errors read 'SOURCE:POSITION: REASON' (1-based position).")
      .def_static("from_columns", &detail::samples_from_columns, py::arg("modality"), py::arg("encoder_items"),
                  py::arg("encoder_tokens"), py::arg("llm_tokens"), py::arg("ids") = py::none(),
                  py::arg("source") = "columns",
                  "Samples from columns: a sequence of modality strings and three contiguous 1-D int64 buffers "
                  "(NumPy arrays), read in place; ids default to the row numbers.")
      .def("__len__", &sample_list::size)
      .def("__getitem__",
           [](const sample_list& samples, std::int64_t index) { return samples[detail::checked_index(index, samples.size())]; },
           py::arg("index"))
      .def(
          "__iter__", [](const sample_list& samples) { return py::make_iterator(samples.begin(), samples.end()); },
          py::keep_alive<0, 1>())
      .def(
          "take",
          [](const sample_list& samples, const std::vector<std::int64_t>& indices) {
            sample_list picked;
            picked.reserve(indices.size());
            for (std::int64_t index : indices) picked.push_back(samples[detail::checked_index(index, samples.size())]);
            return picked;
          },
          py::arg("indices"), "The samples at `indices`, in that order (a new Samples).")
      .def_property_readonly(
          "ids",
          [](const sample_list& samples) {
            std::vector<std::string> ids;
            ids.reserve(samples.size());
            for (const auto& s : samples) ids.push_back(s.id);
            return ids;
          },
          "The samples' ids, in order.")
      .def(
          "to_records",
          [](const sample_list& samples) {
            py::list records;
            for (const auto& s : samples) records.append(detail::sample_record(s));
            return records;
          },
          "The samples as a list of trace records (dicts).")
      .def("__repr__", [](const sample_list& samples) {
        return "<dflop.Samples of " + std::to_string(samples.size()) + " samples>";
      });

  module.def(
      "read_trace", [](py::object path) { return read_trace_file(py::str(py::module_::import("os").attr("fspath")(path))); },
      py::arg("path"),
      "Reads a JSONL trace (one sample per line: id, modality, encoder_items, encoder_tokens, llm_tokens). "
      "InputError names the file, the line and the reason.");
  module.def(
      "read_trace_text", [](const std::string& text, const std::string& source) { return read_trace_text(text, source); },
      py::arg("text"), py::arg("source") = "<text>", "Reads a JSONL trace held in a string; `source` names it in errors.");
  module.def(
      "write_trace",
      [](py::handle samples, py::object path) {
        sample_list storage;
        write_trace_file(py::str(py::module_::import("os").attr("fspath")(path)), as_samples(samples, storage, "samples"));
      },
      py::arg("samples"), py::arg("path"), "Writes samples as a JSONL trace (what read_trace and `dflop --workload` read).");
  module.def("generate_mixture", py::overload_cast<std::string_view, std::size_t, std::uint64_t>(&generate_mixture),
             py::arg("mixture"), py::arg("count"), py::arg("seed"),
             "`count` samples of a built-in mixture (mixture_names()) drawn with `seed`, ids s000000, s000001, ...: "
             "the same trace `dflop generate --mixture M --samples N --seed S` writes.");
  module.def(
      "mixture_names",
      [] { return std::vector<std::string>(mixture_preset_names.begin(), mixture_preset_names.end()); },
      "Names of the built-in mixtures.");
  module.def(
      "statistics",
      [](py::handle samples) {
        sample_list storage;
        const sample_list& all = as_samples(samples, storage, "samples");
        if (all.empty()) throw input_error("samples", 0, "no samples");
        return detail::json_to_python(detail::statistics_json(all));
      },
      py::arg("samples"),
      "Counts per modality and the spread of each size field, as the dict `dflop stats --json` prints (without "
      "its 'workload' field): samples, modalities, quantiles, fields (min, mean, p50, p90, p99, max), "
      "histograms_log2.");
}

}  // namespace dflop::python
