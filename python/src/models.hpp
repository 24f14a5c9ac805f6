// SPDX-License-Identifier: Apache-2.0
//! \file
//! Models, GPUs and clusters in Python. A model or GPU argument is a preset
//! name, a path to a JSON file (ends in ".json", as the CLI's --model and
//! --gpu) or an object read before; `Model` and `Gpu` round-trip through the
//! JSON formats of docs/model-json.md.
#pragma once

#include "common.hpp"

#include <dflop/model/gpu_json.hpp>
#include <dflop/model/model_json.hpp>
#include <dflop/model/presets.hpp>
#include <dflop/plan/cluster.hpp>

#include <string>
#include <vector>

namespace dflop::python {

namespace detail {

//! `value` as a path string when it is os.PathLike, else as given.
inline std::string name_or_path(py::handle value) {
  return py::str(py::module_::import("os").attr("fspath")(value)).cast<std::string>();
}

//! The model `value` denotes: a `Model`, a preset "ENCODER+LLM" or a model JSON file.
inline multimodal_spec model_of(py::handle value) {
  if (py::isinstance<multimodal_spec>(value)) return value.cast<multimodal_spec>();
  return load_model(name_or_path(value), "model");
}

//! The GPU `value` denotes: a `Gpu`, a preset name or a GPU JSON file.
inline gpu_spec gpu_of(py::handle value) {
  if (py::isinstance<gpu_spec>(value)) return value.cast<gpu_spec>();
  return load_gpu(name_or_path(value), "gpu");
}

template <class Spec>
std::vector<std::string> names_of(const std::vector<Spec>& specs) {
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  return names;
}

}  // namespace detail

//! Adds Model, Gpu, Cluster, load_model, load_gpu and the preset name lists.
inline void bind_models(py::module_& module) {
  py::class_<multimodal_spec>(module, "Model", "A multimodal model's shapes: an encoder, a projector and an LLM.")
      .def_readonly("name", &multimodal_spec::name, "'ENCODER+LLM' for presets, or the file's name.")
      .def_property_readonly("encoder_layers", [](const multimodal_spec& m) { return m.encoder.layers; },
                             "Transformer layers of the encoder.")
      .def_property_readonly("llm_layers", [](const multimodal_spec& m) { return m.llm.layers; },
                             "Transformer layers of the LLM.")
      .def("to_json", [](const multimodal_spec& m) { return to_json(m).dump(2); },
           "The model in the model-file format (JSON text, shapes spelled out).")
      .def_static(
          "from_json", [](const std::string& text, const std::string& source) { return parse_model_json(text, source); },
          py::arg("text"), py::arg("source") = "<text>", "A model from JSON text; `source` names it in errors.")
      .def(py::self == py::self)
      .def("__repr__", [](const multimodal_spec& m) { return "<dflop.Model " + m.name + ">"; });

  py::class_<gpu_spec>(module, "Gpu", "One accelerator and its links, in SI units.")
      .def_readonly("name", &gpu_spec::name, "e.g. 'h100-80gb'.")
      .def_readonly("peak_flops", &gpu_spec::peak_flops, "Dense bf16 peak, FLOP/s.")
      .def_readonly("memory_bytes", &gpu_spec::memory_bytes, "Device memory, bytes.")
      .def_readonly("intra_node_bandwidth", &gpu_spec::intra_node_bandwidth, "GPU to GPU in a node, bytes/s per direction.")
      .def_readonly("inter_node_bandwidth", &gpu_spec::inter_node_bandwidth, "Per GPU across nodes, bytes/s per direction.")
      .def_readonly("latency", &gpu_spec::latency, "Per-message latency, seconds.")
      .def("to_json", [](const gpu_spec& g) { return to_json(g).dump(2); }, "The GPU in the GPU-file format (JSON text).")
      .def_static(
          "from_json", [](const std::string& text, const std::string& source) { return parse_gpu_json(text, source); },
          py::arg("text"), py::arg("source") = "<text>", "A GPU from JSON text; `source` names it in errors.")
      .def(py::self == py::self)
      .def("__repr__", [](const gpu_spec& g) { return "<dflop.Gpu " + g.name + ">"; });

  py::class_<cluster_spec>(module, "Cluster", "Where a plan runs: `gpus` GPUs of one kind, `gpus_per_node` to a node.")
      .def(py::init([](int gpus, int gpus_per_node, py::handle gpu) {
             return cluster_spec{gpus, gpus_per_node, detail::gpu_of(gpu)};
           }),
           py::arg("gpus"), py::arg("gpus_per_node") = 8, py::arg("gpu") = "h100-80gb",
           "`gpu`: a preset name (gpu_names()), a GPU JSON file or a Gpu. plan() checks the counts (at least 2 "
           "GPUs, whole nodes).")
      .def_readonly("gpus", &cluster_spec::gpus, "GPUs in all.")
      .def_readonly("gpus_per_node", &cluster_spec::gpus_per_node, "GPUs per node.")
      .def_readonly("gpu", &cluster_spec::gpu, "The GPU kind.")
      .def(py::self == py::self)
      .def("__repr__", [](const cluster_spec& c) {
        return "dflop.Cluster(" + std::to_string(c.gpus) + ", " + std::to_string(c.gpus_per_node) + ", '" + c.gpu.name +
               "')";
      });

  module.def("load_model", &detail::model_of, py::arg("model"),
             "A model from a preset name 'ENCODER+LLM' (encoder_names(), llm_names()) or a model JSON file path.");
  module.def("load_gpu", &detail::gpu_of, py::arg("gpu"), "A GPU from a preset name (gpu_names()) or a GPU JSON file path.");
  module.def("encoder_names", [] { return detail::names_of(encoder_presets()); }, "Built-in encoders.");
  module.def("llm_names", [] { return detail::names_of(llm_presets()); }, "Built-in LLMs.");
  module.def("gpu_names", [] { return detail::names_of(gpu_presets()); }, "Built-in GPUs.");
}

}  // namespace dflop::python
