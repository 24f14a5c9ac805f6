// SPDX-License-Identifier: Apache-2.0
//! \file
//! Device-time emulation for the toy trainer (`--op-cost-us A,B`). The toy's
//! per-token MLP is microseconds of CPU, and on a shared machine with more ranks
//! than cores such times are noise, not a cost curve. With the emulation each
//! stage's forward additionally sleeps A + B x (toy tokens of the microbatch)
//! microseconds and its backward twice that, as a CPU thread waits on a GPU
//! kernel: a known, load-independent cost for the planner to learn.
#pragma once

#include <dflop/error.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <thread>

namespace dflop::toy {

//! The emulated cost of one stage op: fixed + per_token x tokens microseconds
//! forward, twice that backward. Both 0: off.
struct op_cost {
  double fixed_us = 0;      //!< A: microseconds per forward op
  double per_token_us = 0;  //!< B: microseconds per toy token of the microbatch

  //! Whether any time is emulated.
  [[nodiscard]] bool on() const noexcept { return fixed_us > 0 || per_token_us > 0; }
  //! Emulated forward seconds of a microbatch of `tokens` toy tokens.
  [[nodiscard]] double forward_seconds(std::size_t tokens) const noexcept {
    return (fixed_us + per_token_us * static_cast<double>(tokens)) * 1e-6;
  }
  //! Emulated backward seconds (twice the forward, as for a real layer).
  [[nodiscard]] double backward_seconds(std::size_t tokens) const noexcept { return 2 * forward_seconds(tokens); }
};

//! Parses "A,B" (two finite numbers >= 0, microseconds). \throws input_error naming the flag.
[[nodiscard]] inline op_cost parse_op_cost(const std::string& text) {
  const auto fail = [&] {
    return input_error("--op-cost-us", 0, "expected 'A,B' (microseconds per op and per toy token, >= 0), got '" + text + "'");
  };
  const auto comma = text.find(',');
  if (comma == std::string::npos) throw fail();
  const auto number = [&](const std::string& part) {
    char* end = nullptr;
    const double value = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !std::isfinite(value) || value < 0) throw fail();
    return value;
  };
  return {number(text.substr(0, comma)), number(text.substr(comma + 1))};
}

//! Sleeps `seconds` (nothing for 0): the emulated device time of one op.
inline void wait_for_device(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace dflop::toy
