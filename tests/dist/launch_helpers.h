// Helpers for the launcher tests: options for a quick job, reading logs, checking for leftovers.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "trireme/core/error.h"
#include "trireme/dist/launcher.h"

namespace trireme::dist::testing {

inline std::string fresh_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "trireme-dist-test-XXXXXX").string();
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

inline LaunchOptions quick_job(int nproc, std::vector<std::string> command) {
  LaunchOptions o;
  o.nproc_per_node = nproc;
  o.command = std::move(command);
  o.log_dir = fresh_dir();
  o.echo = false;
  o.grace = std::chrono::milliseconds(2000);
  return o;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::string all_logs(const LaunchResult& r, int nproc) {
  std::string out;
  for (int i = 0; i < nproc; ++i) {
    std::string path = r.log_dir + "/rank_" + std::to_string(i) + ".log";
    out += "---- " + path + "\n" + read_file(path);
  }
  return out;
}

// The pids a worker printed as "pid=N" or "child=N" in its log.
inline std::vector<int> pids_in_logs(const LaunchResult& r, int nproc) {
  std::vector<int> pids;
  std::regex re("(pid|child)=([0-9]+)");
  std::string logs = all_logs(r, nproc);
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), re); it != std::sregex_iterator(); ++it)
    pids.push_back(std::stoi((*it)[2]));
  return pids;
}

// Gone: no such process, or a zombie waiting for a parent that is not ours to reap.
inline bool process_gone(int pid) {
  for (int i = 0; i < 50; ++i) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return true;
    ::usleep(20'000);  // killed processes take a moment to disappear
  }
  return false;
}

template <class Fn>
double seconds_of(Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace trireme::dist::testing
