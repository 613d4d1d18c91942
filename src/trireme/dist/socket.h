// TCP socket helpers for the store: listen, connect with retries, and whole-buffer I/O that
// gives up at a deadline. Internal to dist/ (the store and the launcher use them).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace trireme::dist {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Negative timeouts count as 0 and huge ones as a century, so the sum never overflows.
inline Deadline deadline_after(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kCentury = std::chrono::hours(24 * 365 * 100);
  if (timeout < std::chrono::milliseconds(0)) timeout = std::chrono::milliseconds(0);
  if (timeout > kCentury) timeout = kCentury;
  return Clock::now() + timeout;
}

// An owned file descriptor: closed when it goes out of scope.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { int fd = fd_; fd_ = -1; return fd; }
  void close();
  void shutdown();  // wakes a thread blocked on this socket without freeing the descriptor

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 picks a free one; read it back with socket_local_port).
Socket socket_listen(const std::string& host, int port, int backlog = 128);
int socket_local_port(const Socket& s);

// Connects to host:port, retrying refused connections until the deadline (the server may
// not be up yet when workers start). Throws trireme::Error naming the address on failure.
Socket socket_connect(const std::string& host, int port, Deadline deadline);

// Sends/receives exactly n bytes before the deadline. They return false when the peer closed
// the connection (recv: before any byte; send: broken pipe) and throw on timeout or errors.
// `what` names the operation in error messages.
bool socket_send_all(const Socket& s, const void* data, size_t n, Deadline deadline, const char* what);
bool socket_recv_all(const Socket& s, void* data, size_t n, Deadline deadline, const char* what);

// Waits until the socket is readable or the deadline passes; true if readable.
bool socket_wait_readable(const Socket& s, Deadline deadline);

}  // namespace trireme::dist
