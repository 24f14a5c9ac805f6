// SPDX-License-Identifier: Apache-2.0
//! The extension module `dflop._dflop`: errors, samples and traces, models,
//! packing and simulation here; planning in plan.cpp. The Python package
//! `dflop` (python/dflop/__init__.py) re-exports it.
#include "common.hpp"
#include "errors.hpp"
#include "models.hpp"
#include "pack.hpp"
#include "simulate.hpp"
#include "workload.hpp"

PYBIND11_MODULE(_dflop, module) {
  module.doc() = "dflop's C++ planner, packer and per-batch scheduler (use the `dflop` package, not this module).";
  dflop::python::bind_errors(module);
  dflop::python::bind_workload(module);
  dflop::python::bind_models(module);
  dflop::python::bind_pack(module);
  dflop::python::bind_simulate(module);
  dflop::python::bind_plan(module);
}
