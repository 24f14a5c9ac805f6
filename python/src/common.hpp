// SPDX-License-Identifier: Apache-2.0
//! \file
//! What both translation units of the extension `dflop._dflop` share: the
//! opaque sample list (Python's `dflop.Samples`). The extension is two
//! translation units on purpose (module.cpp: everything but planning;
//! plan.cpp: the planner and the batch scheduler) so a `pip install` compiles
//! little; each part is a header of its own with one `bind_*` function.
#pragma once

#include <dflop/workload/sample.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

//! `dflop.Samples` holds the C++ vector itself: passing one to `plan` or
//! `schedule_batch` hands the C++ code a reference, never a per-call list copy.
//! Must be declared before any use of std::vector<sample> in a binding (ODR:
//! both translation units include this header first).
PYBIND11_MAKE_OPAQUE(std::vector<dflop::sample>)

namespace dflop::python {

namespace py = pybind11;

//! The samples of a workload or batch, in order (Python: `dflop.Samples`).
using sample_list = std::vector<sample>;

//! Adds `plan()`, `Plan` and `BatchSchedule` (plan.cpp, the second translation unit).
void bind_plan(py::module_& module);

}  // namespace dflop::python
