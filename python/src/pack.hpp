// SPDX-License-Identifier: Apache-2.0
//! \file
//! `dflop.pack(costs, bins)`: the packers over a float64 buffer (a NumPy array
//! of N samples x D cost dimensions, or N costs), with the GIL released while
//! the packer runs. The packer names are the CLI's (`dflop pack --packer`).
#pragma once

#include "common.hpp"

#include <dflop/error.hpp>
#include <dflop/plan/pack.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dflop::python {

namespace detail {

//! The costs a buffer holds: float64, C-contiguous, 1-D (one dimension) or 2-D (N x D).
inline cost_matrix cost_matrix_of(const py::buffer_info& info) {
  if (info.itemsize != 8 || (info.format != "d" && info.format != "<d" && info.format != "=d"))
    throw input_error("costs", 0, "must be a float64 array, got format '" + info.format + "'");
  if (info.ndim != 1 && info.ndim != 2)
    throw input_error("costs", 0, "must be 1-D (N costs) or 2-D (N samples x D dimensions), got " +
                                      std::to_string(info.ndim) + " dimensions");
  const auto samples = static_cast<std::size_t>(info.shape[0]);
  const auto dimensions = info.ndim == 2 ? static_cast<std::size_t>(info.shape[1]) : std::size_t{1};
  const bool contiguous =
      info.strides.back() == 8 && (info.ndim == 1 || info.strides[0] == static_cast<py::ssize_t>(8 * dimensions));
  if (!contiguous) throw input_error("costs", 0, "must be C-contiguous (numpy.ascontiguousarray)");
  return cost_matrix::borrow(samples, dimensions, std::span<const double>(static_cast<const double*>(info.ptr),
                                                                          samples * dimensions));
}

//! Runs the packer called `name` (sequential, lpt, karmarkar_karp, refined, exact).
inline packing run_packer(const std::string& name, const cost_matrix& costs, std::size_t bins, std::uint64_t seed) {
  const pack_options options{.seed = seed};
  pack_workspace workspace;
  if (name == sequential_packer::name()) return pack(sequential_packer{}, costs, bins, options, workspace);
  if (name == lpt_packer::name()) return pack(lpt_packer{}, costs, bins, options, workspace);
  if (name == karmarkar_karp_packer::name()) return pack(karmarkar_karp_packer{}, costs, bins, options, workspace);
  if (name == refined_packer::name()) return pack(refined_packer{}, costs, bins, options, workspace);
  if (name == exact_packer::name()) return pack(exact_packer{}, costs, bins, options, workspace);
  throw input_error("packer", 0, "unknown packer '" + name + "' (known: sequential, lpt, karmarkar_karp, refined, exact)");
}

}  // namespace detail

//! Adds Packing and pack().
inline void bind_pack(py::module_& module) {
  py::class_<packing>(module, "Packing", "Samples split into K bins, and how good the split is.")
      .def_property_readonly("bins", &packing::bins, "Sample indices of each bin, ascending within a bin.")
      .def_readonly("bin_of", &packing::bin_of, "The bin of each sample.")
      .def_readonly("makespan", &packing::makespan, "Max over bins and dimensions of the summed costs.")
      .def_readonly("lower_bound", &packing::lower_bound, "No packing does better than this.")
      .def_readonly("gap", &packing::gap, "makespan / lower_bound - 1.")
      .def("__repr__", [](const packing& p) {
        return "<dflop.Packing of " + std::to_string(p.bin_count()) + " bins, makespan " + std::to_string(p.makespan) + ">";
      });

  module.def(
      "pack",
      [](const py::buffer& costs, std::size_t bins, const std::string& packer, std::uint64_t seed) {
        const py::buffer_info info = costs.request();  // holds the buffer (and keeps it alive) until we return
        const cost_matrix matrix = detail::cost_matrix_of(info);
        py::gil_scoped_release unlocked;
        return detail::run_packer(packer, matrix, bins, seed);
      },
      py::arg("costs"), py::arg("bins"), py::arg("packer") = "refined", py::arg("seed") = 0,
      "Splits N samples into `bins` non-empty bins minimizing the largest bin's summed cost. `costs`: a C-contiguous "
      "float64 buffer (NumPy array) of N costs or N x D cost vectors, read in place without a copy. Packers: "
      "sequential, lpt, karmarkar_karp, refined (default), exact; the same seed gives the same packing. The GIL is "
      "released while packing. InputError for N < bins or a negative or non-finite cost.");
}

}  // namespace dflop::python
