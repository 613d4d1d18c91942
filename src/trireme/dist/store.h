// The rendezvous store: a TCP key-value server (hosted by the launcher or by rank 0) and its
// client. Every operation has a timeout; clients prove they belong to the job with a token.
//
//   StoreServer server({.host = "127.0.0.1", .port = 0, .token = token});   // port 0: pick one
//   StoreClient store({.host = "127.0.0.1", .port = server.port(), .token = token, .rank = 0});
//   store.set("hello", "world");
//   std::string v = store.get("hello", std::chrono::seconds(5));   // waits up to 5 s for the key
//   int64_t n = store.add("arrived", 1);                            // atomic counter
//   store.wait({"rank_1_ready"}, std::chrono::milliseconds(500));   // throws StoreTimeout
//
// Note [store liveness]
// Each client says which rank it is when it connects and says goodbye when it is destroyed.
// A connection that drops without a goodbye means the process died (killed, crashed, or
// _exit'ed); the server records that rank as dead. A process group whose collective fails
// asks the store for the dead ranks, so the error on the survivors can name the rank that
// went away instead of only a socket error. This is why an authenticated connection that is
// merely idle is never closed by the server.
//
// Note [store under abuse]
// A multi-node job's store listens on every interface, so anyone on the network can connect.
// The server is one thread running an epoll loop over non-blocking sockets with per-connection
// buffers: no peer can block another. Before the handshake a connection may send only the
// handshake (at most kStoreMaxHandshakeBytes, within handshake_timeout) or it is closed;
// unauthenticated connections are capped per peer address and in total (the oldest is dropped
// to make room). After the handshake, keys are capped at kStoreMaxKeyBytes and values at
// kStoreMaxValueBytes; a message over the caps gets an error reply and the connection closes.
// A message begun must finish, and a reply must be taken, within io_timeout. `add` refuses to
// overflow and timeouts are clamped to [0, kStoreMaxTimeout].
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trireme/core/error.h"
#include "trireme/dist/socket.h"

namespace trireme::dist {

using std::chrono::milliseconds;

// Thrown when a store operation (or a wait for keys) runs out of time.
class StoreTimeout : public Error {
 public:
  using Error::Error;
};

// Limits the server enforces (Note [store under abuse]); the client checks them before sending.
inline constexpr size_t kStoreMaxKeyBytes = size_t(4) << 10;
inline constexpr size_t kStoreMaxValueBytes = size_t(16) << 20;
inline constexpr size_t kStoreMaxTokenBytes = 1024;
inline constexpr size_t kStoreMaxHandshakeBytes = 4096;
// Longer timeouts (e.g. milliseconds::max() meant as "forever") are treated as this.
inline constexpr milliseconds kStoreMaxTimeout = std::chrono::hours(24 * 365);

// A fresh random job token (32 hex digits from the OS's random source).
std::string store_make_token();

// The environment variable the launcher passes the token in.
inline constexpr const char* kStoreTokenEnv = "TRIREME_STORE_TOKEN";

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // listening address: loopback for one node, "0.0.0.0" for many
  int port = 0;                    // 0: the OS picks a free port; read it with port()
  std::string token;               // required: connections that do not present it are refused
  // Limits against hostile or broken peers (Note [store under abuse]).
  int max_connections = 1024;          // in total; also kept below the process's open-file limit
  int max_unauthenticated = 512;       // not yet past the handshake, in total
  int max_unauthenticated_per_peer = 64;  // ... from one peer address
  milliseconds handshake_timeout{2'000};  // from connect to a complete handshake
  milliseconds io_timeout{60'000};        // to finish sending a message begun, or to take a reply
};

class StoreServer {
 public:
  explicit StoreServer(const StoreServerOptions& options);
  ~StoreServer();  // stops serving: wakes waiting clients with an error and joins all threads
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  // Forgets all keys and dead ranks (the launcher does this between restarts of the group).
  void clear();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct StoreClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  int rank = -1;                     // who this client is (Note [store liveness]); -1: not a rank
  milliseconds timeout{30'000};      // connecting, and every operation without its own timeout
};

// A connection to the store. Thread-safe: requests from several threads are serialised.
class StoreClient {
 public:
  explicit StoreClient(const StoreClientOptions& options);
  ~StoreClient();  // says goodbye (Note [store liveness])
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until the key exists (up to the timeout; default: the client's) and returns its value.
  std::string get(const std::string& key, std::optional<milliseconds> timeout = {});
  // Adds delta to the integer stored at key (absent counts as 0); returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Sets key to desired if its value is expected (an absent key matches ""); returns the value
  // the key holds afterwards (expected itself if the key is absent and was not set).
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // Waits until all keys exist; throws StoreTimeout naming the missing keys.
  void wait(const std::vector<std::string>& keys, std::optional<milliseconds> timeout = {});
  bool check(const std::vector<std::string>& keys);  // all exist, without waiting
  bool remove(const std::string& key);               // true if the key existed
  int64_t num_keys();
  // Ranks whose connection dropped without a goodbye (Note [store liveness]), in the order
  // the server saw them drop: the first is the likeliest cause of the others' failures.
  std::vector<int> dead_ranks();

  int rank() const { return options_.rank; }
  const StoreClientOptions& options() const { return options_; }

 private:
  std::vector<std::string> request(std::vector<std::string> parts, milliseconds timeout);

  StoreClientOptions options_;
  std::mutex mutex_;
  Socket socket_;
};

}  // namespace trireme::dist
