// Runs a shell command line (the trireme binary, usually) and returns its exit status and its
// stdout and stderr together: how the CLI tests meet trireme as a user does.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace trireme::cli_testing {

struct Result {
  int status;       // the exit status, or 128 + the signal that ended it
  std::string out;  // stdout and stderr together
};

inline Result run_command(const std::string& command_line) {
  FILE* p = ::popen((command_line + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// `trireme ARGS`.
inline Result run(const std::string& args) { return run_command(std::string(TRIREME_BINARY) + " " + args); }

}  // namespace trireme::cli_testing
