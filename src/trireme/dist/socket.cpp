// TCP socket helpers: listen, connect with retries, deadline-bounded whole-buffer I/O.
#include "trireme/dist/socket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "trireme/core/error.h"

namespace trireme::dist {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() { if (list) freeaddrinfo(list); }
};

AddrInfo resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  AddrInfo info;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &info.list);
  TRIREME_CHECK(rc == 0, "store: cannot resolve ", host, ":", port, ": ", gai_strerror(rc));
  return info;
}

int remaining_ms(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000 ? 1'000'000 : static_cast<int>(left);
}

// Waits for `events` on fd until the deadline; true when ready (or in error: the I/O call
// that follows reports it).
bool wait_for(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0 && Clock::now() >= deadline) return false;
    if (rc == 0) continue;  // poll's wait is capped; the deadline is further away
    if (errno != EINTR) TRIREME_FAIL("store: poll failed: ", std::strerror(errno));
  }
}

}  // namespace

Socket socket_listen(const std::string& host, int port, int backlog) {
  AddrInfo info = resolve(host, port, true);
  std::string last_error = "no address";
  for (addrinfo* a = info.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) { last_error = std::strerror(errno); continue; }
    int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    return s;
  }
  TRIREME_FAIL("store: cannot listen on ", host, ":", port, ": ", last_error);
}

int socket_local_port(const Socket& s) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  TRIREME_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0,
                "store: getsockname failed: ", std::strerror(errno));
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

Socket socket_connect(const std::string& host, int port, Deadline deadline) {
  std::string last_error = "timed out";
  auto backoff = std::chrono::milliseconds(10);
  do {
    AddrInfo info = resolve(host, port, false);
    for (addrinfo* a = info.list; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      if (!s.valid()) { last_error = std::strerror(errno); continue; }
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_for(s.fd(), POLLOUT, deadline)) { last_error = "timed out"; continue; }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) { last_error = std::strerror(errno); continue; }
      int one = 1;
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return s;
    }
    // Refused or unreachable: the server may still be starting; retry with a growing pause.
    std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - Clock::now() + std::chrono::milliseconds(1))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  } while (Clock::now() < deadline);
  TRIREME_FAIL("store: cannot connect to ", host, ":", port, ": ", last_error);
}

bool socket_send_all(const Socket& s, const void* data, size_t n, Deadline deadline, const char* what) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(s.fd(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) { p += k; n -= static_cast<size_t>(k); continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(s.fd(), POLLOUT, deadline)) TRIREME_FAIL(what, ": timed out sending");
      continue;
    }
    if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) return false;
    TRIREME_FAIL(what, ": send failed: ", std::strerror(errno));
  }
  return true;
}

bool socket_recv_all(const Socket& s, void* data, size_t n, Deadline deadline, const char* what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(s.fd(), p, n, MSG_DONTWAIT);
    if (k > 0) { p += k; n -= static_cast<size_t>(k); continue; }
    if (k == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(s.fd(), POLLIN, deadline)) TRIREME_FAIL(what, ": timed out");
      continue;
    }
    if (errno == ECONNRESET) return false;
    TRIREME_FAIL(what, ": recv failed: ", std::strerror(errno));
  }
  return true;
}

bool socket_wait_readable(const Socket& s, Deadline deadline) { return wait_for(s.fd(), POLLIN, deadline); }

}  // namespace trireme::dist
