// SPDX-License-Identifier: Apache-2.0
//! \file
//! The methods a plan holds: dflop's own choice and the two baselines it is
//! compared with. The library passes `plan_method` values; names ("dflop",
//! "data_blind", "dflop_reference") are only for files, tools and reports,
//! parsed once at that edge.
#pragma once

#include <dflop/error.hpp>

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace dflop {

//! A method of choosing and running a configuration.
enum class plan_method : std::uint8_t {
  dflop,            //!< dflop's choice: data-aware search, its packer and slot order
  data_blind,       //!< mean-sample planning, sequential packing, round-robin slots in arrival order
  dflop_reference,  //!< the published DFLOP system's rules: refined packing, one microbatch in flight for memory
};

//! Every method, dflop's first.
inline constexpr std::array<plan_method, 3> all_plan_methods{plan_method::dflop, plan_method::data_blind,
                                                             plan_method::dflop_reference};

//! The method's name in files, tools and reports.
[[nodiscard]] constexpr std::string_view name_of(plan_method method) noexcept {
  switch (method) {
    case plan_method::dflop: return "dflop";
    case plan_method::data_blind: return "data_blind";
    case plan_method::dflop_reference: return "dflop_reference";
  }
  return "?";
}

//! The method called `name`; throws `input_error` from `source` naming the
//! known methods when there is none.
[[nodiscard]] inline plan_method parse_plan_method(std::string_view name, const std::string& source = "method") {
  for (const plan_method method : all_plan_methods)
    if (name_of(method) == name) return method;
  std::string known;
  for (const plan_method method : all_plan_methods) known.append(known.empty() ? "" : ", ").append(name_of(method));
  throw input_error(source, 0, "unknown method '" + std::string(name) + "' (known: " + known + ")");
}

//! Writes the method's name.
inline std::ostream& operator<<(std::ostream& out, plan_method method) { return out << name_of(method); }

}  // namespace dflop
