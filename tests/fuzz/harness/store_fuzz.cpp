// The store server on arbitrary client bytes: a StoreServer on loopback, one connection that
// sends the input (handshake included: the seeds are real clients' bytes recorded by
// make_corpus, with kStoreFuzzToken as the job's token) and closes its sending side. The
// server must answer or drop the connection, never crash; the harness reads what comes back
// for a bounded time, then stops the server (which must stop, whatever it was doing).
// It goes through the public API and the socket only, so it does not depend on the wire format.
#include <cstdint>
#include <sys/socket.h>

#include "fuzz_support.h"
#include "store_token.h"
#include "trireme/core/error.h"
#include "trireme/dist/socket.h"
#include "trireme/dist/store.h"

using namespace trireme;
using std::chrono::milliseconds;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dist::StoreServer server({.host = "127.0.0.1", .port = 0, .token = std::string(fuzz::kStoreFuzzToken)});
  dist::Socket client = dist::socket_connect("127.0.0.1", server.port(), dist::deadline_after(milliseconds(5000)));
  try {
    dist::socket_send_all(client, data, size, dist::deadline_after(milliseconds(1000)), "fuzz client");
  } catch (const Error&) {
    // The server stopped reading (it waits on a key): what it did with the rest is still tested.
  }
  ::shutdown(client.fd(), SHUT_WR);
  // An operation may wait on a key for as long as the input asks; 200 ms is enough for the
  // others to be answered, and the server's destructor must end the wait.
  const auto deadline = dist::deadline_after(milliseconds(200));
  char buf[4096];
  while (dist::socket_wait_readable(client, deadline)) {
    if (::recv(client.fd(), buf, sizeof buf, 0) <= 0) break;
  }
  return 0;
}
