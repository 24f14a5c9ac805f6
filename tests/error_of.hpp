// SPDX-License-Identifier: Apache-2.0
//! The message an action throws, for tests that check what an error says.
#pragma once

#include <dflop/error.hpp>

#include <string>

namespace dflop::test {

//! Runs `action` and returns the `what()` of the `Exception` it throws, or
//! "no error" when it throws none (other exceptions propagate).
template <class Exception = input_error, class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const Exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace dflop::test
