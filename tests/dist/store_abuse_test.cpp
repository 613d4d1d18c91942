// The store against hostile or broken peers: what a stranger may send before the handshake,
// caps after it, overflowing `add`, absurd timeouts, idle connections that must not make the
// server spin, and slow peers that must not hold up others (Note [store under abuse]).
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <thread>

#include "store_process.h"
#include "trireme/dist/store.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;
using namespace std::chrono_literals;

namespace {

struct AbuseFixture : ::testing::Test {
  std::string token = store_make_token();
  StoreServer server{{.host = "127.0.0.1", .port = 0, .token = token, .handshake_timeout = 500ms}};
  StoreClientOptions client_options(int rank = -1) {
    return {.host = "127.0.0.1", .port = server.port(), .token = token, .rank = rank, .timeout = 5000ms};
  }
  // A raw connection past the handshake.
  int authenticated_raw() {
    int fd = raw_connect(server.port());
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(send_bytes(fd, frame_bytes({"trireme-store/1", token, "-1"})));
    char ok[4 + 4 + 2];
    EXPECT_EQ(::recv(fd, ok, sizeof(ok), MSG_WAITALL), static_cast<ssize_t>(sizeof(ok)));
    return fd;
  }
};

}  // namespace

TEST_F(AbuseFixture, AHugeLengthPrefixBeforeTheHandshakeClosesTheConnection) {
  int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  // One part of 1 GiB - 1: the server must not believe it (the reproduction).
  ASSERT_TRUE(send_bytes(fd, std::string("\x01\x00\x00\x00\xff\xff\xff\x3f", 8)));
  auto reply = read_until_closed(fd, 3000ms);
  ::close(fd);
  ASSERT_TRUE(reply.has_value()) << "the server kept a connection that announced a 1 GiB handshake";
  EXPECT_TRUE(reply->empty());  // a stranger gets no answer
  StoreClient c(client_options());
  c.set("still", "serving");
  EXPECT_EQ(c.get("still"), "serving");
}

TEST_F(AbuseFixture, JunkBeforeTheHandshakeClosesTheConnection) {
  int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  send_bytes(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(read_until_closed(fd, 3000ms).has_value());
  ::close(fd);
}

TEST_F(AbuseFixture, AConnectionThatNeverCompletesTheHandshakeIsClosed) {
  int idle = raw_connect(server.port());
  int slow = raw_connect(server.port());
  ASSERT_GE(idle, 0);
  ASSERT_GE(slow, 0);
  send_bytes(slow, std::string("\x03\x00", 2));  // half a frame header, then nothing
  EXPECT_TRUE(read_until_closed(idle, 5000ms).has_value()) << "idle stranger not closed";
  EXPECT_TRUE(read_until_closed(slow, 5000ms).has_value()) << "slow stranger not closed";
  ::close(idle);
  ::close(slow);
}

TEST_F(AbuseFixture, ASlowPeerDoesNotHoldUpOthers) {
  // A peer in the middle of a handshake and an authenticated peer in the middle of a request.
  int stranger = raw_connect(server.port());
  ASSERT_GE(stranger, 0);
  send_bytes(stranger, std::string("\x03\x00\x00\x00\x0f\x00", 6));
  int member = authenticated_raw();
  send_bytes(member, frame_bytes({"set", "k", std::string(1000, 'v')}).substr(0, 20));
  StoreClient a(client_options()), b(client_options());
  std::thread setter([&] { b.set("k2", "v2"); });
  EXPECT_EQ(a.get("k2", 10'000ms), "v2");  // served while the others' messages are unfinished
  setter.join();
  ::close(stranger);
  ::close(member);
}

TEST_F(AbuseFixture, AddThatWouldOverflowIsAnErrorAndChangesNothing) {
  StoreClient c(client_options());
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(c.add("n", kMax), kMax);
  try {
    c.add("n", 1);
    FAIL() << "add past INT64_MAX must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.get("n"), std::to_string(kMax));
  EXPECT_EQ(c.add("m", std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  EXPECT_THROW(c.add("m", -1), Error);
  EXPECT_EQ(c.add("n", -kMax), 0);  // the connection still works
}

TEST_F(AbuseFixture, HugeAndNegativeTimeoutsAreClamped) {
  StoreClient a(client_options()), b(client_options());
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    b.set("late", "v");
  });
  EXPECT_EQ(a.get("late", std::chrono::milliseconds::max()), "v");
  a.wait({"late"}, std::chrono::milliseconds::max());
  setter.join();
  EXPECT_THROW(a.get("absent", -5ms), StoreTimeout);
  EXPECT_THROW(a.wait({"absent"}, std::chrono::milliseconds::min()), StoreTimeout);
  // The same through the wire, from a client that sends the numbers itself.
  int fd = authenticated_raw();
  send_bytes(fd, frame_bytes({"get", std::to_string(std::numeric_limits<int64_t>::max()), "late"}));
  send_bytes(fd, frame_bytes({"wait", std::to_string(std::numeric_limits<int64_t>::min()), "absent"}));
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
  EXPECT_EQ(a.get("late"), "v");
}

TEST_F(AbuseFixture, KeysAndValuesOverTheCapsAreRefusedByTheClient) {
  StoreClient c(client_options());
  try {
    c.set("big", std::string(kStoreMaxValueBytes + 1, 'x'));
    FAIL() << "a value over the cap must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capped"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.set(std::string(kStoreMaxKeyBytes + 1, 'k'), "v"), Error);
  EXPECT_THROW(c.get(std::string(kStoreMaxKeyBytes + 1, 'k'), 10ms), Error);
  c.set(std::string(kStoreMaxKeyBytes, 'k'), std::string(kStoreMaxValueBytes, 'v'));  // at the caps: fine
  EXPECT_EQ(c.get(std::string(kStoreMaxKeyBytes, 'k')).size(), kStoreMaxValueBytes);
}

TEST_F(AbuseFixture, AnOversizedMessageAfterTheHandshakeGetsAnErrorThenClose) {
  int fd = authenticated_raw();
  send_bytes(fd, std::string("\x03\x00\x00\x00\x03\x00\x00\x00set\xff\xff\xff\x3f", 15));
  auto reply = read_until_closed(fd, 5000ms);
  ::close(fd);
  ASSERT_TRUE(reply.has_value()) << "the server kept reading a 1 GiB message";
  EXPECT_NE(reply->find("too large"), std::string::npos) << *reply;
  // An oversized key inside a well-formed message: an error reply, and the connection stays.
  int fd2 = authenticated_raw();
  send_bytes(fd2, frame_bytes({"set", std::string(kStoreMaxKeyBytes + 1, 'k'), "v"}));
  char buf[512];
  ssize_t n = ::recv(fd2, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find("over the cap"), std::string::npos);
  ::close(fd2);
}

TEST(StoreAbuse, IdleConnectionsDoNotMakeTheServerSpin) {
  std::string token = store_make_token();
  StoreProcess store({.host = "127.0.0.1", .port = 0, .token = token, .handshake_timeout = 10'000ms});
  raise_fd_limit();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    int fd = raw_connect(store.port());
    if (fd >= 0) idle.push_back(fd);
  }
  StoreClient member({.host = "127.0.0.1", .port = store.port(), .token = token, .timeout = 5000ms});
  member.set("k", "v");
  double before = store.cpu_seconds();
  std::this_thread::sleep_for(1000ms);
  double used = store.cpu_seconds() - before;
  EXPECT_EQ(member.get("k"), "v");
  // An idle server uses (almost) no CPU; the bug this guards against used 0.8 s per second.
  EXPECT_LT(used, 0.1) << "the store used " << used << " s of CPU in 1 s with " << idle.size() << " idle connections";
  for (int fd : idle) ::close(fd);
}

TEST(StoreAbuse, StrangersAreCappedPerPeerAddressOldestDroppedFirst) {
  std::string token = store_make_token();
  StoreServer server({.host = "127.0.0.1", .port = 0, .token = token, .max_unauthenticated_per_peer = 4,
                      .handshake_timeout = 30'000ms});
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) fds.push_back(raw_connect(server.port(), "127.0.0.2"));
  // The two oldest were dropped to make room for the newest four.
  EXPECT_TRUE(read_until_closed(fds[0], 3000ms).has_value());
  EXPECT_TRUE(read_until_closed(fds[1], 3000ms).has_value());
  EXPECT_FALSE(read_until_closed(fds[5], 200ms).has_value());
  // Another address is not affected.
  StoreClient c({.host = "127.0.0.1", .port = server.port(), .token = token, .timeout = 5000ms});
  c.set("a", "b");
  for (int fd : fds) ::close(fd);
}
