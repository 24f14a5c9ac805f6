// SPDX-License-Identifier: Apache-2.0
//! The extension's second translation unit: the planner and the batch
//! scheduler, the heaviest headers, compiled apart from the rest so the two
//! build in parallel.
#include "common.hpp"
#include "plan_bindings.hpp"

namespace dflop::python {

void bind_plan(py::module_& module) { add_plan_bindings(module); }

}  // namespace dflop::python
