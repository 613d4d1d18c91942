// The rendezvous store: server (a thread per connection) and client, over framed TCP messages.
#include "trireme/dist/store.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <poll.h>
#include <random>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace trireme::dist {

// Wire format: a frame is a u32 part count, then per part a u32 byte length and the bytes.
// Requests are [op, args...]; replies are ["ok", results...], ["timeout", what] or
// ["error", message]. The first frame on a connection is the handshake
// [kMagic, token, rank], answered with ["ok"] or ["refused", reason].
namespace {

constexpr const char* kMagic = "trireme-store/1";
constexpr uint32_t kMaxParts = 1u << 20;
constexpr uint32_t kMaxPartBytes = 1u << 30;
// Extra time a client gives the server beyond an operation's own timeout before it decides
// the server itself is gone.
constexpr milliseconds kReplyGrace{5'000};
constexpr auto kForever = std::chrono::hours(24 * 365);

void write_frame(const Socket& s, const std::vector<std::string>& parts, Deadline deadline, const char* what) {
  std::string buf;
  auto put_u32 = [&](uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); };
  put_u32(static_cast<uint32_t>(parts.size()));
  for (const auto& p : parts) {
    put_u32(static_cast<uint32_t>(p.size()));
    buf += p;
  }
  TRIREME_CHECK(socket_send_all(s, buf.data(), buf.size(), deadline, what), what, ": connection closed");
}

// nullopt when the peer closed the connection (or sent something that is not a frame).
std::optional<std::vector<std::string>> read_frame(const Socket& s, Deadline deadline, const char* what) {
  uint32_t n = 0;
  if (!socket_recv_all(s, &n, 4, deadline, what) || n > kMaxParts) return std::nullopt;
  std::vector<std::string> parts(n);
  for (auto& p : parts) {
    uint32_t len = 0;
    if (!socket_recv_all(s, &len, 4, deadline, what) || len > kMaxPartBytes) return std::nullopt;
    p.resize(len);
    if (len && !socket_recv_all(s, p.data(), len, deadline, what)) return std::nullopt;
  }
  return parts;
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

struct StoreServer::Impl {
  StoreServerOptions options;
  Socket listener;
  int port = 0;
  int wake_fd = -1;  // eventfd: tells the accept loop to stop

  std::mutex mutex;
  std::condition_variable changed;  // a key was set, or the server is stopping
  std::map<std::string, std::string> data;
  std::vector<int> dead;  // in the order their connections dropped
  bool stopping = false;

  struct Connection {
    Socket socket;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  std::mutex connections_mutex;
  std::list<Connection> connections;
  std::thread accept_thread;

  void accept_loop();
  void serve(Connection& c);
  std::vector<std::string> handle(const std::vector<std::string>& req);
  void reap_finished();
};

void StoreServer::Impl::reap_finished() {
  std::lock_guard lock(connections_mutex);
  for (auto it = connections.begin(); it != connections.end();) {
    if (it->finished) {
      it->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

void StoreServer::Impl::accept_loop() {
  while (true) {
    pollfd fds[2] = {{listener.fd(), POLLIN, 0}, {wake_fd, POLLIN, 0}};
    int rc = ::poll(fds, 2, 1000);
    if (rc < 0 && errno == EINTR) continue;
    if (fds[1].revents) return;
    reap_finished();
    if (rc <= 0 || !(fds[0].revents & POLLIN)) continue;
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(connections_mutex);
    Connection& c = connections.emplace_back();
    c.socket = Socket(fd);
    c.thread = std::thread([this, &c] { serve(c); });
  }
}

void StoreServer::Impl::serve(Connection& c) {
  int rank = -1;
  bool said_goodbye = false;
  bool authenticated = false;
  try {
    // A peer that never completes the handshake must not hold the thread for long.
    auto hello = read_frame(c.socket, deadline_after(milliseconds(10'000)), "store server: handshake");
    if (hello && hello->size() == 3 && (*hello)[0] == kMagic) {
      if (!token_equal((*hello)[1], options.token)) {
        write_frame(c.socket, {"refused", "wrong job token"}, deadline_after(milliseconds(1000)), "store server");
      } else {
        rank = static_cast<int>(parse_i64((*hello)[2], "handshake rank"));
        authenticated = true;
        write_frame(c.socket, {"ok"}, deadline_after(milliseconds(10'000)), "store server");
      }
    }
    while (authenticated) {
      auto req = read_frame(c.socket, Clock::now() + kForever, "store server: request");
      if (!req || req->empty()) break;
      if ((*req)[0] == "bye") {
        said_goodbye = true;
        write_frame(c.socket, {"ok"}, deadline_after(milliseconds(1000)), "store server");
        break;
      }
      std::vector<std::string> reply;
      try {
        reply = handle(*req);
      } catch (const std::exception& e) {
        reply = {"error", e.what()};
      }
      write_frame(c.socket, reply, deadline_after(milliseconds(30'000)), "store server: reply");
    }
  } catch (const std::exception&) {
    // The connection broke: treated like a close below.
  }
  if (authenticated && !said_goodbye && rank >= 0) {
    std::lock_guard lock(mutex);
    if (!stopping && std::find(dead.begin(), dead.end(), rank) == dead.end()) dead.push_back(rank);
  }
  c.socket.shutdown();
  c.finished = true;
}

std::vector<std::string> StoreServer::Impl::handle(const std::vector<std::string>& req) {
  const std::string& op = req[0];
  auto need = [&](size_t n) {
    TRIREME_CHECK(req.size() >= n, "store: '", op, "' needs ", n - 1, " arguments, got ", req.size() - 1);
  };
  std::unique_lock lock(mutex);
  if (op == "set") {
    need(3);
    data[req[1]] = req[2];
    changed.notify_all();
    return {"ok"};
  }
  if (op == "get" || op == "wait") {
    // get: [get, timeout_ms, key]; wait: [wait, timeout_ms, keys...]
    need(3);
    auto deadline = deadline_after(milliseconds(parse_i64(req[1], "timeout")));
    auto all_present = [&] {
      return std::all_of(req.begin() + 2, req.end(), [&](const std::string& k) { return data.count(k) > 0; });
    };
    if (!changed.wait_until(lock, deadline, [&] { return stopping || all_present(); })) {
      std::string missing;
      for (auto it = req.begin() + 2; it != req.end(); ++it)
        if (!data.count(*it)) missing += (missing.empty() ? "" : ", ") + *it;
      return {"timeout", missing};
    }
    if (stopping) return {"error", "the store server is shutting down"};
    if (op == "get") return {"ok", data[req[2]]};
    return {"ok"};
  }
  if (op == "add") {
    need(3);
    auto it = data.find(req[1]);
    int64_t value = (it == data.end() ? 0 : parse_i64(it->second, "add")) + parse_i64(req[2], "add");
    data[req[1]] = std::to_string(value);
    changed.notify_all();
    return {"ok", std::to_string(value)};
  }
  if (op == "cas") {
    need(4);
    auto it = data.find(req[1]);
    if (it == data.end()) {
      if (!req[2].empty()) return {"ok", req[2]};
      data[req[1]] = req[3];
      changed.notify_all();
      return {"ok", req[3]};
    }
    if (it->second == req[2]) {
      it->second = req[3];
      changed.notify_all();
    }
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
  TRIREME_FAIL("store: unknown operation '", op, "'");
}

StoreServer::StoreServer(const StoreServerOptions& options) : impl_(std::make_unique<Impl>()) {
  TRIREME_CHECK(!options.token.empty(), "StoreServer: a job token is required");
  impl_->options = options;
  impl_->listener = socket_listen(options.host, options.port);
  impl_->port = socket_local_port(impl_->listener);
  impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC);
  TRIREME_CHECK(impl_->wake_fd >= 0, "StoreServer: eventfd failed: ", std::strerror(errno));
  impl_->accept_thread = std::thread([impl = impl_.get()] { impl->accept_loop(); });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(impl_->wake_fd, &one, sizeof(one));
  impl_->accept_thread.join();
  std::lock_guard lock(impl_->connections_mutex);
  for (auto& c : impl_->connections) c.socket.shutdown();
  for (auto& c : impl_->connections) c.thread.join();
  impl_->connections.clear();
  ::close(impl_->wake_fd);
}

int StoreServer::port() const { return impl_->port; }

void StoreServer::clear() {
  std::lock_guard lock(impl_->mutex);
  impl_->data.clear();
  impl_->dead.clear();
}

// ---------------------------------------------------------------------------------------------
// Client

StoreClient::StoreClient(const StoreClientOptions& options) : options_(options) {
  auto deadline = deadline_after(options.timeout);
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
  auto deadline = deadline_after(timeout + kReplyGrace);
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
  request({"set", key, value}, options_.timeout);
}

std::string StoreClient::get(const std::string& key, std::optional<milliseconds> timeout) {
  milliseconds t = timeout.value_or(options_.timeout);
  return request({"get", std::to_string(t.count()), key}, t).at(0);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  return parse_i64(request({"add", key, std::to_string(delta)}, options_.timeout).at(0), "add");
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return request({"cas", key, expected, desired}, options_.timeout).at(0);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::optional<milliseconds> timeout) {
  if (keys.empty()) return;
  milliseconds t = timeout.value_or(options_.timeout);
  std::vector<std::string> parts = {"wait", std::to_string(t.count())};
  parts.insert(parts.end(), keys.begin(), keys.end());
  request(std::move(parts), t);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
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
