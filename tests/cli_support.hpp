// SPDX-License-Identifier: Apache-2.0
//! Runs the built `dflop` tool from a test and captures what it printed.
#pragma once

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#ifndef DFLOP_CLI_PATH
#error "cli_support.hpp needs DFLOP_CLI_PATH (tests/CMakeLists.txt defines it when the tool is built)"
#endif

namespace dflop::test {

//! What one run of the tool did.
struct cli_result {
  int exit_code = -1;     //!< the process's exit status
  std::string out;        //!< standard output
  std::string err;        //!< standard error
};

//! Runs `dflop ARGS` through the shell (ARGS is shell-quoted by the caller) and
//! waits for it. `tag` names the scratch file that captures standard error.
inline cli_result run_cli(const std::string& args, const std::string& tag = "cli") {
  const std::string err_path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/" + tag + ".stderr";
  const std::string command = std::string("'") + DFLOP_CLI_PATH + "' " + args + " 2>'" + err_path + "'";
  cli_result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, read);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err_file(err_path);
  std::stringstream err_text;
  err_text << err_file.rdbuf();
  result.err = err_text.str();
  return result;
}

//! Writes `content` to a scratch file named `name` and returns its path.
inline std::string write_scratch_file(const std::string& name, const std::string& content) {
  const std::string path = std::string(DFLOP_TEST_SCRATCH_DIR) + "/" + name;
  std::ofstream(path) << content;
  return path;
}

}  // namespace dflop::test
