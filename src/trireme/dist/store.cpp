// The rendezvous store: server (one thread, an epoll loop over non-blocking sockets) and client,
// over framed TCP messages.
#include "trireme/dist/store.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <random>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

#include "trireme/core/checked.h"

namespace trireme::dist {

// Wire format: a frame is a u32 part count, then per part a u32 byte length and the bytes.
// Requests are [op, args...]; replies are ["ok", results...], ["timeout", what] or
// ["error", message]. The first frame on a connection is the handshake
// [kMagic, token, rank], answered with ["ok"] or ["refused", reason].
namespace {

constexpr const char* kMagic = "trireme-store/1";
// After the handshake: a request carries at most this many parts (a wait's keys) and bytes.
constexpr size_t kMaxParts = size_t(1) << 16;
constexpr size_t kMaxFrameBytes = kStoreMaxValueBytes + (size_t(1) << 20);
// Extra time a client gives the server beyond an operation's own timeout before it decides
// the server itself is gone.
constexpr milliseconds kReplyGrace{5'000};

milliseconds clamp_timeout(milliseconds t) { return std::clamp(t, milliseconds(0), kStoreMaxTimeout); }

std::string encode_frame(const std::vector<std::string>& parts) {
  std::string buf;
  auto put_u32 = [&](uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); };
  put_u32(checked_cast<uint32_t>(parts.size(), "store: message part count"));
  for (const auto& p : parts) {
    put_u32(checked_cast<uint32_t>(p.size(), "store: message part size"));
    buf += p;
  }
  return buf;
}

void write_frame(const Socket& s, const std::vector<std::string>& parts, Deadline deadline, const char* what) {
  std::string buf = encode_frame(parts);
  TRIREME_CHECK(socket_send_all(s, buf.data(), buf.size(), deadline, what), what, ": connection closed");
}

// The client's reader (the server's is parse_frame). nullopt when the peer closed the
// connection or sent something that is not a frame within the caps.
std::optional<std::vector<std::string>> read_frame(const Socket& s, Deadline deadline, const char* what) {
  uint32_t n = 0;
  if (!socket_recv_all(s, &n, 4, deadline, what) || n > kMaxParts) return std::nullopt;
  std::vector<std::string> parts(n);
  size_t total = 0;
  for (auto& p : parts) {
    uint32_t len = 0;
    if (!socket_recv_all(s, &len, 4, deadline, what)) return std::nullopt;
    total += 4 + size_t(len);
    if (total > kMaxFrameBytes) return std::nullopt;
    p.resize(len);
    if (len && !socket_recv_all(s, p.data(), len, deadline, what)) return std::nullopt;
  }
  return parts;
}

enum class Parsed { kNeedMore, kFrame, kTooLarge, kMalformed };

struct FrameLimits {
  size_t max_parts;
  size_t max_bytes;  // the whole frame, headers included
};

// Parses one frame from the front of `in` without trusting any length before checking it
// against the limits, so a peer can never make the server allocate more than it has sent.
Parsed parse_frame(const std::string& in, const FrameLimits& limits, std::vector<std::string>* parts,
                   size_t* consumed) {
  auto u32_at = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, in.data() + at, 4);
    return v;
  };
  if (in.size() < 4) return Parsed::kNeedMore;
  size_t n = u32_at(0);
  if (n == 0) return Parsed::kMalformed;
  if (n > limits.max_parts) return Parsed::kTooLarge;
  size_t at = 4;
  for (size_t i = 0; i < n; ++i) {
    if (at + 4 > limits.max_bytes) return Parsed::kTooLarge;
    if (in.size() < at + 4) return Parsed::kNeedMore;
    size_t len = u32_at(at);
    if (len > limits.max_bytes || at + 4 + len > limits.max_bytes) return Parsed::kTooLarge;
    at += 4 + len;
    if (in.size() < at) return Parsed::kNeedMore;
  }
  parts->clear();
  parts->reserve(n);
  at = 4;
  for (size_t i = 0; i < n; ++i) {
    size_t len = u32_at(at);
    parts->emplace_back(in, at + 4, len);
    at += 4 + len;
  }
  *consumed = at;
  return Parsed::kFrame;
}

// Compares without an early exit, so the time taken does not leak how much of a token matched.
bool token_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int64_t parse_i64(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  TRIREME_FAIL("store: ", what, ": '", s, "' is not an integer");
}

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  else if (addr.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  return text;
}

}  // namespace

std::string store_make_token() {
  std::random_device rd;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += hex[rd() & 15];
  return token;
}

// ---------------------------------------------------------------------------------------------
// Server

namespace {

struct Connection {
  Socket socket;
  std::string peer;
  uint64_t serial = 0;  // accept order: the oldest unauthenticated connection is dropped first
  Deadline accepted;
  bool authenticated = false;
  int rank = -1;
  bool said_goodbye = false;
  bool close_after_reply = false;
  std::string in;          // bytes received, not yet a whole frame
  Deadline in_since{};     // when the oldest unparsed byte arrived
  std::string out;         // reply bytes not yet sent
  size_t out_sent = 0;
  Deadline out_since{};
  std::vector<std::string> waiting;  // a get/wait request not yet satisfied (empty: none)
  Deadline wait_deadline{};
  uint32_t events = 0;     // what it is registered for in epoll
};

}  // namespace

struct StoreServer::Impl {
  StoreServerOptions options;
  Socket listener;
  int port = 0;
  Socket epoll;
  Socket wake;  // eventfd: tells the loop to stop
  std::thread thread;
  std::atomic<bool> stopping{false};

  std::mutex mutex;  // data and dead: the loop and clear() share them
  std::map<std::string, std::string> data;
  std::vector<int> dead;  // in the order their connections dropped

  std::unordered_map<int, std::unique_ptr<Connection>> connections;  // by fd
  std::map<uint64_t, int> unauthenticated;                            // serial -> fd, oldest first
  std::map<std::string, std::map<uint64_t, int>> unauthenticated_by_peer;
  uint64_t next_serial = 0;
  int max_connections = 0;
  Deadline accept_paused_until{};  // out of file descriptors with nothing to drop
  std::vector<int> ready;  // connections whose reply is out and whose next request may be buffered

  void run();
  void accept_all();
  void on_event(Connection& c, uint32_t events);
  void read_some(Connection& c);
  void process(Connection& c);
  void handshake(Connection& c, const std::vector<std::string>& hello);
  void request(Connection& c, std::vector<std::string> req);
  bool try_complete_wait(Connection& c);
  void wake_waiters();
  void reply(Connection& c, const std::vector<std::string>& parts);
  void flush(Connection& c);
  void update_interest(Connection& c);
  void expire(Deadline now);
  void serve_ready();
  int next_timeout_ms(Deadline now);
  void close(int fd);
  void forget_unauthenticated(const Connection& c);
  std::vector<std::string> handle(const std::vector<std::string>& req);
};

void StoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  while (!stopping) {
    int n = ::epoll_wait(epoll.fd(), events.data(), static_cast<int>(events.size()), next_timeout_ms(Clock::now()));
    if (n < 0 && errno != EINTR) break;  // cannot happen with valid descriptors
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake.fd()) continue;  // stopping is set
      if (fd == listener.fd()) {
        accept_all();
        continue;
      }
      auto it = connections.find(fd);
      if (it != connections.end()) on_event(*it->second, events[i].events);
    }
    auto now = Clock::now();
    if (accept_paused_until != Deadline{} && now >= accept_paused_until) {
      accept_paused_until = {};
      epoll_event ev{.events = EPOLLIN, .data = {.fd = listener.fd()}};
      ::epoll_ctl(epoll.fd(), EPOLL_CTL_ADD, listener.fd(), &ev);
    }
    expire(now);
    serve_ready();
  }
  // Stopping: waiters learn why (best effort, without blocking), then every connection closes.
  std::vector<int> fds;
  for (auto& [fd, c] : connections) fds.push_back(fd);
  for (int fd : fds) {
    auto it = connections.find(fd);
    if (it == connections.end() || it->second->waiting.empty()) continue;
    it->second->waiting.clear();
    reply(*it->second, {"error", "the store server is shutting down"});
  }
  for (int fd : fds) close(fd);
}

void StoreServer::Impl::serve_ready() {
  // Iterative rather than recursive: a peer that pipelines many requests cannot deepen the stack.
  while (!ready.empty()) {
    int fd = ready.back();
    ready.pop_back();
    auto it = connections.find(fd);
    if (it != connections.end()) process(*it->second);
  }
}

int StoreServer::Impl::next_timeout_ms(Deadline now) {
  Deadline next = now + std::chrono::seconds(60);
  if (accept_paused_until != Deadline{}) next = std::min(next, accept_paused_until);
  for (auto& [fd, c] : connections) {
    if (!c->authenticated) next = std::min(next, c->accepted + options.handshake_timeout);
    if (!c->in.empty()) next = std::min(next, c->in_since + options.io_timeout);
    if (c->out_sent < c->out.size()) next = std::min(next, c->out_since + options.io_timeout);
    if (!c->waiting.empty()) next = std::min(next, c->wait_deadline);
  }
  auto ms = std::chrono::duration_cast<milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60'000));
}

void StoreServer::Impl::expire(Deadline now) {
  std::vector<int> doomed, timed_out;
  for (auto& [fd, c] : connections) {
    bool late = (!c->authenticated && now >= c->accepted + options.handshake_timeout) ||
                (!c->in.empty() && now >= c->in_since + options.io_timeout) ||
                (c->out_sent < c->out.size() && now >= c->out_since + options.io_timeout);
    if (late) {
      doomed.push_back(fd);
    } else if (!c->waiting.empty() && now >= c->wait_deadline) {
      timed_out.push_back(fd);
    }
  }
  for (int fd : doomed) close(fd);
  for (int fd : timed_out) {
    auto it = connections.find(fd);
    if (it == connections.end()) continue;
    Connection* c = it->second.get();
    {
      std::string missing;
      {
        std::lock_guard lock(mutex);
        for (auto k = c->waiting.begin() + 2; k != c->waiting.end(); ++k)
          if (!data.count(*k)) missing += (missing.empty() ? "" : ", ") + *k;
      }
      c->waiting.clear();
      reply(*c, {"timeout", missing});
    }
  }
}

void StoreServer::Impl::accept_all() {
  for (int accepted = 0; accepted < 64; ++accepted) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: make room by dropping the oldest stranger, or stop accepting a
        // moment (a listener that stays readable would otherwise make the loop spin).
        if (!unauthenticated.empty()) {
          close(unauthenticated.begin()->second);
          continue;
        }
        ::epoll_ctl(epoll.fd(), EPOLL_CTL_DEL, listener.fd(), nullptr);
        accept_paused_until = Clock::now() + milliseconds(100);
      }
      return;  // EAGAIN: nothing more to accept
    }
    auto c = std::make_unique<Connection>();
    c->socket = Socket(fd);
    c->peer = peer_address(fd);
    c->serial = next_serial++;
    c->accepted = Clock::now();
    // Make room: the oldest unauthenticated connection of this peer, of anyone, then (at the
    // total cap with every connection authenticated) refuse the newcomer.
    if (auto mine = unauthenticated_by_peer.find(c->peer);
        mine != unauthenticated_by_peer.end() && static_cast<int>(mine->second.size()) >= options.max_unauthenticated_per_peer)
      close(mine->second.begin()->second);
    if (static_cast<int>(unauthenticated.size()) >= options.max_unauthenticated)
      close(unauthenticated.begin()->second);
    if (static_cast<int>(connections.size()) >= max_connections && !unauthenticated.empty())
      close(unauthenticated.begin()->second);
    if (static_cast<int>(connections.size()) >= max_connections) continue;  // c's destructor closes fd
    unauthenticated.emplace(c->serial, fd);
    unauthenticated_by_peer[c->peer].emplace(c->serial, fd);
    Connection& ref = *c;
    connections.emplace(fd, std::move(c));
    update_interest(ref);
  }
}

void StoreServer::Impl::forget_unauthenticated(const Connection& c) {
  unauthenticated.erase(c.serial);
  auto it = unauthenticated_by_peer.find(c.peer);
  if (it == unauthenticated_by_peer.end()) return;
  it->second.erase(c.serial);
  if (it->second.empty()) unauthenticated_by_peer.erase(it);
}

void StoreServer::Impl::close(int fd) {
  auto it = connections.find(fd);
  if (it == connections.end()) return;
  Connection& c = *it->second;
  if (c.authenticated && !c.said_goodbye && c.rank >= 0 && !stopping) {
    std::lock_guard lock(mutex);
    if (std::find(dead.begin(), dead.end(), c.rank) == dead.end()) dead.push_back(c.rank);
  }
  if (!c.authenticated) forget_unauthenticated(c);
  ::epoll_ctl(epoll.fd(), EPOLL_CTL_DEL, fd, nullptr);
  connections.erase(it);  // closes the socket
}

void StoreServer::Impl::update_interest(Connection& c) {
  // Back-pressure: one request at a time per connection, so a peer that does not read its
  // replies (or pipelines requests) cannot make the server buffer without bound.
  bool busy = !c.waiting.empty() || c.out_sent < c.out.size();
  uint32_t want = EPOLLRDHUP | (busy ? 0u : uint32_t(EPOLLIN)) | (c.out_sent < c.out.size() ? uint32_t(EPOLLOUT) : 0u);
  if (c.events == want) return;
  epoll_event ev{.events = want, .data = {.fd = c.socket.fd()}};
  ::epoll_ctl(epoll.fd(), c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.socket.fd(), &ev);
  c.events = want;
}

void StoreServer::Impl::on_event(Connection& c, uint32_t events) {
  int fd = c.socket.fd();
  if (events & EPOLLOUT) {
    flush(c);
    if (!connections.count(fd)) return;
  }
  if (events & EPOLLIN) {
    read_some(c);
    if (!connections.count(fd)) return;
  }
  // The peer hung up (also while it waits for a key: a rank killed inside get() is dead).
  if ((events & (EPOLLHUP | EPOLLERR)) || ((events & EPOLLRDHUP) && !(c.events & EPOLLIN))) close(fd);
}

void StoreServer::Impl::read_some(Connection& c) {
  const int fd = c.socket.fd();
  const size_t cap = c.authenticated ? kMaxFrameBytes : kStoreMaxHandshakeBytes;
  char buf[65536];
  for (int round = 0; round < 16; ++round) {  // bounded: other connections get their turn
    size_t room = cap + 4 - std::min(cap + 4, c.in.size());
    ssize_t k = ::recv(fd, buf, std::min(sizeof(buf), std::max<size_t>(room, 1)), 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (k <= 0) {  // closed by the peer, or reset
      close(fd);
      return;
    }
    if (c.in.empty()) c.in_since = Clock::now();
    c.in.append(buf, static_cast<size_t>(k));
    process(c);
    if (!connections.count(fd) || !(c.events & EPOLLIN)) return;
  }
}

void StoreServer::Impl::process(Connection& c) {
  const int fd = c.socket.fd();
  while (c.waiting.empty() && c.out_sent == c.out.size() && !c.in.empty()) {
    FrameLimits limits = c.authenticated ? FrameLimits{kMaxParts, kMaxFrameBytes} : FrameLimits{3, kStoreMaxHandshakeBytes};
    std::vector<std::string> parts;
    size_t consumed = 0;
    Parsed p = parse_frame(c.in, limits, &parts, &consumed);
    if (p == Parsed::kNeedMore) return;
    if (p != Parsed::kFrame) {
      if (c.authenticated && p == Parsed::kTooLarge) {
        c.in.clear();
        c.close_after_reply = true;
        reply(c, {"error", str_cat("store: message too large (keys are capped at ", kStoreMaxKeyBytes,
                                   " bytes, values at ", kStoreMaxValueBytes, " bytes)")});
      } else {
        close(fd);  // a stranger sending something other than a handshake gets no answer
      }
      return;
    }
    c.in.erase(0, consumed);
    if (!c.in.empty()) c.in_since = Clock::now();
    if (!c.authenticated) {
      handshake(c, parts);
    } else {
      request(c, std::move(parts));
    }
    if (!connections.count(fd) || c.close_after_reply) return;
  }
}

void StoreServer::Impl::handshake(Connection& c, const std::vector<std::string>& hello) {
  if (hello.size() != 3 || hello[0] != kMagic) return close(c.socket.fd());
  if (!token_equal(hello[1], options.token)) {
    c.close_after_reply = true;
    return reply(c, {"refused", "wrong job token"});
  }
  int rank = -1;
  try {
    rank = checked_cast<int>(parse_i64(hello[2], "handshake rank"), "store: handshake rank");
  } catch (const std::exception&) {
    return close(c.socket.fd());
  }
  forget_unauthenticated(c);
  c.authenticated = true;
  c.rank = rank;
  // Ranks that vanish without closing (a host that lost power) are found by keepalive probes.
  int one = 1, idle = 60, interval = 10, count = 6;
  ::setsockopt(c.socket.fd(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(c.socket.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(c.socket.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(c.socket.fd(), IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  ::setsockopt(c.socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  reply(c, {"ok"});
}

void StoreServer::Impl::request(Connection& c, std::vector<std::string> req) {
  if (req[0] == "bye") {
    c.said_goodbye = true;
    c.close_after_reply = true;
    return reply(c, {"ok"});
  }
  if ((req[0] == "get" || req[0] == "wait") && req.size() >= 3) {
    // get: [get, timeout_ms, key]; wait: [wait, timeout_ms, keys...]
    milliseconds timeout{0};
    try {
      timeout = clamp_timeout(milliseconds(parse_i64(req[1], "timeout")));
    } catch (const std::exception& e) {
      return reply(c, {"error", e.what()});
    }
    c.waiting = std::move(req);
    c.wait_deadline = Clock::now() + timeout;
    if (!try_complete_wait(c)) update_interest(c);
    return;
  }
  std::vector<std::string> out;
  try {
    out = handle(req);
  } catch (const std::exception& e) {
    out = {"error", e.what()};
  }
  reply(c, out);
  if (req[0] == "set" || req[0] == "add" || req[0] == "cas") wake_waiters();
}

bool StoreServer::Impl::try_complete_wait(Connection& c) {
  std::vector<std::string> out;
  {
    std::lock_guard lock(mutex);
    bool all = std::all_of(c.waiting.begin() + 2, c.waiting.end(), [&](const std::string& k) { return data.count(k) > 0; });
    if (!all) return false;
    out = {"ok"};
    if (c.waiting[0] == "get") out.push_back(data[c.waiting[2]]);
  }
  c.waiting.clear();
  reply(c, out);
  return true;
}

void StoreServer::Impl::wake_waiters() {
  std::vector<Connection*> waiters;
  for (auto& [fd, c] : connections)
    if (!c->waiting.empty()) waiters.push_back(c.get());
  for (Connection* c : waiters) try_complete_wait(*c);
}

void StoreServer::Impl::reply(Connection& c, const std::vector<std::string>& parts) {
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    c.out_since = Clock::now();
  }
  c.out += encode_frame(parts);
  flush(c);
}

void StoreServer::Impl::flush(Connection& c) {
  const int fd = c.socket.fd();
  while (c.out_sent < c.out.size()) {
    ssize_t k = ::send(fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c.out_sent += static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return close(fd);
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
    if (c.close_after_reply) return close(fd);
    // A request that arrived while this one was being served is taken up from the loop.
    if (c.waiting.empty() && !c.in.empty()) ready.push_back(fd);
  }
  update_interest(c);
}

std::vector<std::string> StoreServer::Impl::handle(const std::vector<std::string>& req) {
  const std::string& op = req[0];
  auto need = [&](size_t n) {
    TRIREME_CHECK(req.size() >= n, "store: '", op, "' needs ", n - 1, " arguments, got ", req.size() - 1);
  };
  auto key = [&](size_t i) -> const std::string& {
    TRIREME_CHECK(req[i].size() <= kStoreMaxKeyBytes, "store: ", op, ": a key of ", req[i].size(),
                  " bytes is over the cap of ", kStoreMaxKeyBytes, " bytes");
    return req[i];
  };
  std::lock_guard lock(mutex);
  auto value = [&](size_t i) -> const std::string& {
    TRIREME_CHECK(req[i].size() <= kStoreMaxValueBytes, "store: ", op, ": a value of ", req[i].size(),
                  " bytes is over the cap of ", kStoreMaxValueBytes, " bytes");
    return req[i];
  };
  if (op == "set") {
    need(3);
    data[key(1)] = value(2);
    return {"ok"};
  }
  if (op == "add") {
    need(3);
    auto it = data.find(key(1));
    int64_t old = it == data.end() ? 0 : parse_i64(it->second, "add");
    int64_t value = checked_add(old, parse_i64(req[2], "add"), "store: add to '", req[1], "'");
    data[req[1]] = std::to_string(value);
    return {"ok", std::to_string(value)};
  }
  if (op == "cas") {
    need(4);
    auto it = data.find(key(1));
    if (it == data.end()) {
      if (!req[2].empty()) return {"ok", req[2]};
      data[req[1]] = value(3);
      return {"ok", req[3]};
    }
    if (it->second == req[2]) it->second = value(3);
    return {"ok", it->second};
  }
  if (op == "check") {
    bool all = std::all_of(req.begin() + 1, req.end(), [&](const std::string& k) { return data.count(k) > 0; });
    return {"ok", all ? "1" : "0"};
  }
  if (op == "delete") {
    need(2);
    return {"ok", data.erase(req[1]) ? "1" : "0"};
  }
  if (op == "num_keys") return {"ok", std::to_string(data.size())};
  if (op == "dead_ranks") {
    std::vector<std::string> reply = {"ok"};
    for (int r : dead) reply.push_back(std::to_string(r));
    return reply;
  }
  TRIREME_FAIL("store: unknown operation '", op.substr(0, 64), "'");
}

StoreServer::StoreServer(const StoreServerOptions& options) : impl_(std::make_unique<Impl>()) {
  TRIREME_CHECK(!options.token.empty(), "StoreServer: a job token is required");
  TRIREME_CHECK(options.token.size() <= kStoreMaxTokenBytes, "StoreServer: the job token has ", options.token.size(),
                " bytes; at most ", kStoreMaxTokenBytes, " are allowed");
  TRIREME_CHECK(options.max_connections >= 1 && options.max_unauthenticated >= 1 &&
                    options.max_unauthenticated_per_peer >= 1,
                "StoreServer: connection limits must be >= 1");
  Impl& s = *impl_;
  s.options = options;
  // Leave descriptors for the rest of the process (workers' pipes, logs).
  rlimit nofile{};
  s.max_connections = options.max_connections;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    s.max_connections = static_cast<int>(std::min<rlim_t>(s.max_connections, nofile.rlim_cur > 128 ? nofile.rlim_cur - 64 : nofile.rlim_cur / 2));
  s.max_connections = std::max(s.max_connections, 1);
  s.listener = socket_listen(options.host, options.port);
  s.port = socket_local_port(s.listener);
  ::fcntl(s.listener.fd(), F_SETFL, ::fcntl(s.listener.fd(), F_GETFL) | O_NONBLOCK);
  s.epoll = Socket(::epoll_create1(EPOLL_CLOEXEC));
  TRIREME_CHECK(s.epoll.valid(), "StoreServer: epoll_create1 failed: ", std::strerror(errno));
  s.wake = Socket(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  TRIREME_CHECK(s.wake.valid(), "StoreServer: eventfd failed: ", std::strerror(errno));
  for (int fd : {s.listener.fd(), s.wake.fd()}) {
    epoll_event ev{.events = EPOLLIN, .data = {.fd = fd}};
    TRIREME_CHECK(::epoll_ctl(s.epoll.fd(), EPOLL_CTL_ADD, fd, &ev) == 0, "StoreServer: epoll_ctl failed: ",
                  std::strerror(errno));
  }
  s.thread = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::~StoreServer() {
  impl_->stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(impl_->wake.fd(), &one, sizeof(one));
  impl_->thread.join();
}

int StoreServer::port() const { return impl_->port; }

void StoreServer::clear() {
  std::lock_guard lock(impl_->mutex);
  impl_->data.clear();
  impl_->dead.clear();
}

// ---------------------------------------------------------------------------------------------
// Client

namespace {

void check_key(const std::string& key, const char* op) {
  TRIREME_CHECK(key.size() <= kStoreMaxKeyBytes, "store ", op, ": the key has ", key.size(),
                " bytes; keys are capped at ", kStoreMaxKeyBytes, " bytes");
}

void check_value(const std::string& value, const char* op) {
  TRIREME_CHECK(value.size() <= kStoreMaxValueBytes, "store ", op, ": the value has ", value.size(),
                " bytes; values are capped at ", kStoreMaxValueBytes, " bytes (16 MiB)");
}

}  // namespace

StoreClient::StoreClient(const StoreClientOptions& options) : options_(options) {
  options_.timeout = clamp_timeout(options.timeout);
  TRIREME_CHECK(options.token.size() <= kStoreMaxTokenBytes, "store: the job token has ", options.token.size(),
                " bytes; at most ", kStoreMaxTokenBytes, " are allowed");
  auto deadline = deadline_after(options_.timeout);
  socket_ = socket_connect(options.host, options.port, deadline);
  const std::string where = str_cat("store at ", options.host, ":", options.port);
  write_frame(socket_, {kMagic, options.token, std::to_string(options.rank)}, deadline, "store: handshake");
  auto reply = read_frame(socket_, deadline, "store: handshake");
  TRIREME_CHECK(reply && !reply->empty(), "store: the ", where, " closed the connection during the handshake");
  TRIREME_CHECK((*reply)[0] == "ok", "store: the ", where, " refused the connection: ",
                reply->size() > 1 ? (*reply)[1] : std::string("no reason given"),
                " (is ", kStoreTokenEnv, " the one the launcher gave this job?)");
}

StoreClient::~StoreClient() {
  try {
    std::lock_guard lock(mutex_);
    if (socket_.valid()) {
      auto deadline = deadline_after(milliseconds(1000));
      write_frame(socket_, {"bye"}, deadline, "store: goodbye");
      read_frame(socket_, deadline, "store: goodbye");
    }
  } catch (const std::exception&) {
    // The server is gone already: nothing to say goodbye to.
  }
}

std::vector<std::string> StoreClient::request(std::vector<std::string> parts, milliseconds timeout) {
  std::lock_guard lock(mutex_);
  const std::string op = parts[0];
  auto deadline = deadline_after(clamp_timeout(timeout) + kReplyGrace);
  std::string what = str_cat("store ", op, " (", options_.host, ":", options_.port, ")");
  TRIREME_CHECK(socket_.valid(), what, ": the connection was closed after an earlier error");
  std::optional<std::vector<std::string>> reply;
  try {
    write_frame(socket_, parts, deadline, what.c_str());
    reply = read_frame(socket_, deadline, what.c_str());
  } catch (...) {
    // A reply may still arrive later and would be taken for the next request's: drop the
    // connection so that cannot happen.
    socket_.close();
    throw;
  }
  if (!reply || reply->empty()) socket_.close();
  TRIREME_CHECK(reply && !reply->empty(), what, ": the server closed the connection");
  if ((*reply)[0] == "timeout")
    throw StoreTimeout(str_cat("store: ", op, " timed out after ", timeout.count(), " ms waiting for key(s) ",
                               reply->size() > 1 ? (*reply)[1] : std::string()));
  TRIREME_CHECK((*reply)[0] == "ok", "store: ", op, " failed: ", reply->size() > 1 ? (*reply)[1] : "");
  reply->erase(reply->begin());
  return *reply;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  check_key(key, "set");
  check_value(value, "set");
  request({"set", key, value}, options_.timeout);
}

std::string StoreClient::get(const std::string& key, std::optional<milliseconds> timeout) {
  check_key(key, "get");
  milliseconds t = clamp_timeout(timeout.value_or(options_.timeout));
  return request({"get", std::to_string(t.count()), key}, t).at(0);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  return parse_i64(request({"add", key, std::to_string(delta)}, options_.timeout).at(0), "add");
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  check_key(key, "compare_set");
  check_value(expected, "compare_set");
  check_value(desired, "compare_set");
  return request({"cas", key, expected, desired}, options_.timeout).at(0);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::optional<milliseconds> timeout) {
  if (keys.empty()) return;
  TRIREME_CHECK(keys.size() + 2 <= kMaxParts, "store wait: ", keys.size(), " keys; at most ", kMaxParts - 2,
                " can be waited for at once");
  for (const auto& k : keys) check_key(k, "wait");
  milliseconds t = clamp_timeout(timeout.value_or(options_.timeout));
  std::vector<std::string> parts = {"wait", std::to_string(t.count())};
  parts.insert(parts.end(), keys.begin(), keys.end());
  request(std::move(parts), t);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  TRIREME_CHECK(keys.size() + 1 <= kMaxParts, "store check: ", keys.size(), " keys; at most ", kMaxParts - 1,
                " can be checked at once");
  std::vector<std::string> parts = {"check"};
  parts.insert(parts.end(), keys.begin(), keys.end());
  return request(std::move(parts), options_.timeout).at(0) == "1";
}

bool StoreClient::remove(const std::string& key) { return request({"delete", key}, options_.timeout).at(0) == "1"; }

int64_t StoreClient::num_keys() { return parse_i64(request({"num_keys"}, options_.timeout).at(0), "num_keys"); }

std::vector<int> StoreClient::dead_ranks() {
  std::vector<int> ranks;
  for (const auto& r : request({"dead_ranks"}, options_.timeout)) ranks.push_back(static_cast<int>(parse_i64(r, "dead_ranks")));
  return ranks;
}

}  // namespace trireme::dist
