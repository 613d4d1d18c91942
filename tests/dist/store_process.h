// Helpers for the store abuse tests: a store server in a child process (so its memory and CPU
// can be read from /proc), raw connections that speak (or abuse) the wire format by hand.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "trireme/dist/store.h"

namespace trireme::dist::testing {

// A StoreServer running in a forked child until this object is destroyed.
class StoreProcess {
 public:
  explicit StoreProcess(StoreServerOptions options) : token_(options.token) {
    int port_pipe[2], ctl[2];
    EXPECT_EQ(::pipe(port_pipe), 0);
    EXPECT_EQ(::pipe(ctl), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(port_pipe[0]);
      ::close(ctl[1]);
      StoreServer server(options);
      int port = server.port();
      [[maybe_unused]] ssize_t w = ::write(port_pipe[1], &port, sizeof(port));
      char c;
      while (::read(ctl[0], &c, 1) != 0) {  // until the parent closes its end
      }
      ::_exit(0);
    }
    ::close(port_pipe[1]);
    ::close(ctl[0]);
    ctl_ = ctl[1];
    EXPECT_EQ(::read(port_pipe[0], &port_, sizeof(port_)), static_cast<ssize_t>(sizeof(port_)));
    ::close(port_pipe[0]);
  }
  ~StoreProcess() {
    ::close(ctl_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the store process died: status " << status;
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& token() const { return token_; }

  // A field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
  long status_kib(const std::string& field) const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
    }
    return -1;
  }

  // User + system CPU time the store process has used.
  double cpu_seconds() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    return double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
  }

 private:
  std::string token_;
  pid_t pid_ = -1;
  int port_ = 0;
  int ctl_ = -1;
};

// A blocking TCP connection to 127.0.0.1:port from `source` (any 127.x.y.z address).
inline int raw_connect(int port, const char* source = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline std::string frame_bytes(const std::vector<std::string>& parts) {
  std::string buf;
  auto put = [&](uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); };
  put(static_cast<uint32_t>(parts.size()));
  for (const auto& p : parts) {
    put(static_cast<uint32_t>(p.size()));
    buf += p;
  }
  return buf;
}

inline bool send_bytes(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Everything the peer sends until it closes the connection, or nullopt if it is still open
// after `timeout`.
inline std::optional<std::string> read_until_closed(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string got;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
  return std::nullopt;
}

// Raises the open-file soft limit to the hard limit; returns the soft limit now in force.
inline long raise_fd_limit() {
  rlimit r{};
  ::getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    ::getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur == RLIM_INFINITY ? 1L << 20 : static_cast<long>(r.rlim_cur);
}

}  // namespace trireme::dist::testing
