// SPDX-License-Identifier: Apache-2.0
//! Runs a command line from a checker program (the toy trainer under test,
//! directly or under mpirun) and captures what it printed: the checkers in
//! tests/toy_runtime and tests/plan_run share it.
#pragma once

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace dflop::test {

//! A command as its words.
using command = std::vector<std::string>;

//! Stops a check with `why`.
[[noreturn]] inline void fail(const std::string& why) { throw std::runtime_error(why); }

//! `word` quoted for the shell.
inline std::string shell_quoted(const std::string& word) {
  std::string out(1, '\'');
  for (char c : word) {
    if (c == '\'') out.append("'\\''");
    else out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

//! What a command did.
struct command_outcome {
  int status = -1;     //!< exit status (-1: it did not exit normally)
  std::string output;  //!< standard output (and standard error, when captured)
};

//! Runs `cmd` and waits for it; standard error passes through unless `with_stderr`.
inline command_outcome run_command(const command& cmd, bool with_stderr = false) {
  std::string line;
  for (const auto& word : cmd) line.append(line.empty() ? "" : " ").append(shell_quoted(word));
  if (with_stderr) line.append(" 2>&1");
  std::cerr << "running: " << line << "\n";
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) fail("cannot start: " + line);
  command_outcome out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.output.append(buffer, n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

//! Runs `cmd` and returns its standard output; fails on a non-zero status.
inline std::string run_ok(const command& cmd) {
  auto out = run_command(cmd);
  if (out.status != 0) fail("command failed (status " + std::to_string(out.status) + ")\n" + out.output);
  return std::move(out.output);
}

}  // namespace dflop::test
