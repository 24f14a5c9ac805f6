// SPDX-License-Identifier: Apache-2.0
//! \file
//! How a `dflop` subcommand plugs into the tool: a source file defines a
//! function that adds its CLI11 subcommand and registers it with
//! `DFLOP_REGISTER_COMMAND`. Errors are reported by throwing: `dflop::input_error`
//! (bad input, exit status 2) or any other `dflop::error` (exit status 1).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace dflop::cli {

//! Adds one subcommand (and its callback) to the tool's top-level app.
using command_installer = void (*)(CLI::App& app);

//! One registered subcommand.
struct registered_command {
  std::string name;            //!< the subcommand's name, for a stable help order
  command_installer install;   //!< adds it to the app
};

//! All registered subcommands (filled during static initialization).
inline std::vector<registered_command>& command_registry() {
  static std::vector<registered_command> registry;
  return registry;
}

//! Registers a subcommand when its translation unit is linked in.
struct command_registration {
  command_registration(std::string name, command_installer install) {
    command_registry().push_back({std::move(name), install});
  }
};

}  // namespace dflop::cli

//! Registers `INSTALLER` (a `void(CLI::App&)`) under `NAME`.
#define DFLOP_REGISTER_COMMAND(NAME, INSTALLER) \
  static const ::dflop::cli::command_registration dflop_command_registration_##INSTALLER{NAME, &INSTALLER}
