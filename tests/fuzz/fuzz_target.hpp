// SPDX-License-Identifier: Apache-2.0
//! What every fuzz target checks: a reader given arbitrary bytes either
//! returns or throws `dflop::error` (the one error story: bad input says what,
//! where and why). Any other exception is a bug and aborts, so libFuzzer
//! records the input; crashes, hangs and sanitizer reports abort on their own.
#pragma once

#include <dflop/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

namespace dflop::fuzz {

//! Runs `read(text)` on the fuzzer's bytes; aborts on anything but success or `dflop::error`.
template <class Read>
int run(const std::uint8_t* data, std::size_t size, Read&& read) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    read(text);
  } catch (const dflop::error&) {
    // Rejected as bad input: what a reader must do.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: exception other than dflop::error: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: a non-standard exception escaped\n");
    std::abort();
  }
  return 0;
}

//! Aborts with `what` when `condition` is false (a property of an accepted input).
inline void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace dflop::fuzz
