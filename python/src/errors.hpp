// SPDX-License-Identifier: Apache-2.0
//! \file
//! dflop's one error story, in Python: `dflop.Error` (a RuntimeError) for any
//! `dflop::error`; `dflop.InputError`, also a ValueError, for bad input, with
//! the C++ error's `source`, `line` and `reason` as attributes so a caller can
//! point at the bad record; `dflop.InfeasibleError` when no plan or packing can
//! satisfy the request.
#pragma once

#include "common.hpp"

#include <dflop/error.hpp>

#include <exception>

namespace dflop::python {

namespace detail {

//! The three exception types, created once when the module loads (the module
//! keeps them alive; the translator only borrows them).
struct exception_types {
  py::handle error;
  py::handle input_error;
  py::handle infeasible_error;
};

inline exception_types& exceptions() {
  static exception_types types;
  return types;
}

//! A new exception class `dflop.NAME` deriving from `bases`, stored in `module`.
inline py::handle make_exception(py::module_& module, const char* name, const char* doc, py::tuple bases) {
  const std::string qualified = std::string("dflop.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  module.add_object(name, py::handle(type));  // steals the new reference
  return type;
}

//! Raises `dflop.InputError(what)` with `source`, `line` and `reason` set.
inline void raise_input_error(const input_error& failure) {
  py::object instance = py::reinterpret_borrow<py::object>(exceptions().input_error)(failure.what());
  instance.attr("source") = failure.source();
  instance.attr("line") = failure.line();
  instance.attr("reason") = failure.reason();
  PyErr_SetObject(exceptions().input_error.ptr(), instance.ptr());
}

}  // namespace detail

//! Adds the exception types and translates dflop's C++ exceptions into them.
inline void bind_errors(py::module_& module) {
  auto& types = detail::exceptions();
  types.error = detail::make_exception(module, "Error", "Base of every error dflop raises (a RuntimeError).",
                                       py::make_tuple(py::handle(PyExc_RuntimeError)));
  types.input_error = detail::make_exception(
      module, "InputError",
      "Bad input: a file, a record, an argument. Also a ValueError. str(e) reads 'SOURCE:LINE: REASON' "
      "('SOURCE: REASON' when no line applies); the attributes source (file or argument name), line (1-based line "
      "of a file, 1-based position of an in-memory record, 0 when none applies) and reason say the same apart.",
      py::make_tuple(types.error, py::handle(PyExc_ValueError)));
  types.infeasible_error = detail::make_exception(
      module, "InfeasibleError",
      "A request no plan, packing or schedule can satisfy: e.g. no configuration fits in GPU memory (the message "
      "names the closest one and its shortfall).",
      py::make_tuple(types.error));
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const input_error& failure) {
      detail::raise_input_error(failure);
    } catch (const infeasible_error& failure) {
      PyErr_SetString(detail::exceptions().infeasible_error.ptr(), failure.what());
    } catch (const error& failure) {
      PyErr_SetString(detail::exceptions().error.ptr(), failure.what());
    }
  });
}

}  // namespace dflop::python
