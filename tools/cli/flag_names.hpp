// SPDX-License-Identifier: Apache-2.0
//! The tool's side of error messages: the library names the parameter that was
//! wrong (`planner_options::global_batch`), the tool names the flag a user typed
//! (`--global-batch`).
#pragma once

#include <dflop/error.hpp>

#include <array>
#include <string>
#include <string_view>
#include <utility>

namespace dflop::cli {

//! The flag that sets library parameter `parameter`, or `parameter` itself when no flag does.
[[nodiscard]] inline std::string_view flag_for(std::string_view parameter) noexcept {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> flags{{
      {"cluster_spec::gpus", "--gpus"},
      {"cluster_spec::gpus_per_node", "--gpus-per-node"},
      {"cluster_spec::gpu", "--gpu"},
      {"planner_options::global_batch", "--global-batch"},
      {"planner_options::batches", "--batches"},
      {"method", "--method"},
  }};
  for (const auto& [name, flag] : flags)
    if (name == parameter) return flag;
  return parameter;
}

//! `error`'s message with its source named as the tool's flag when one sets it.
[[nodiscard]] inline std::string message_for_user(const input_error& error) {
  const std::string_view flag = flag_for(error.source());
  if (flag == error.source()) return error.what();
  return input_error(std::string(flag), error.line(), error.reason()).what();
}

}  // namespace dflop::cli
