// SPDX-License-Identifier: Apache-2.0
//! The `dflop` tool: dispatches to the registered subcommands.
#include "command.hpp"
#include "flag_names.hpp"

#include <dflop/error.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"dflop: data-aware pipeline-parallel planning for multimodal LLM training"};
  app.require_subcommand(0, 1);
  auto& registry = dflop::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& command : registry) command.install(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      // No subcommand: the main job. `demo` runs when it exists, else `stats` on the built-in workload.
      for (const char* fallback : {"demo", "stats"}) {
        if (auto found = std::find_if(registry.begin(), registry.end(), [&](const auto& c) { return c.name == fallback; });
            found != registry.end()) {
          const char* args[] = {argv[0], fallback};
          app.parse(2, const_cast<char**>(args));
          return 0;
        }
      }
      std::cout << app.help();
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const dflop::input_error& e) {
    std::cerr << "dflop: error: " << dflop::cli::message_for_user(e) << "\n";
    return 2;
  } catch (const dflop::error& e) {
    std::cerr << "dflop: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "dflop: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
