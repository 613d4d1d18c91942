// Store: every operation, timeouts that fire, token refusal, and dead-rank detection.
#include <gtest/gtest.h>

#include <chrono>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "trireme/dist/store.h"

using namespace trireme;
using namespace trireme::dist;
using namespace std::chrono_literals;

namespace {

struct StoreFixture : ::testing::Test {
  std::string token = store_make_token();
  StoreServer server{{.host = "127.0.0.1", .port = 0, .token = token}};
  StoreClientOptions client_options(int rank = -1) {
    return {.host = "127.0.0.1", .port = server.port(), .token = token, .rank = rank, .timeout = 2000ms};
  }
};

template <class Fn>
std::chrono::milliseconds time_of(Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

}  // namespace

TEST_F(StoreFixture, SetGetAddCompareSetDelete) {
  StoreClient c(client_options());
  c.set("a", "hello");
  EXPECT_EQ(c.get("a"), "hello");
  c.set("bin", std::string("\0\1\2", 3));
  EXPECT_EQ(c.get("bin"), std::string("\0\1\2", 3));
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -2), 3);
  EXPECT_EQ(c.get("n"), "3");
  EXPECT_EQ(c.compare_set("k", "", "v1"), "v1");      // absent + expected "" -> set
  EXPECT_EQ(c.compare_set("k", "nope", "v2"), "v1");  // mismatch -> unchanged
  EXPECT_EQ(c.compare_set("k", "v1", "v2"), "v2");
  EXPECT_EQ(c.compare_set("absent", "x", "y"), "x");
  EXPECT_FALSE(c.check({"absent"}));
  EXPECT_TRUE(c.check({"a", "k"}));
  EXPECT_EQ(c.num_keys(), 4);
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  EXPECT_EQ(c.num_keys(), 3);
  EXPECT_THROW(c.add("k", 1), Error);  // "v2" is not a number
}

TEST_F(StoreFixture, GetWaitsForAKeySetByAnotherClient) {
  StoreClient a(client_options()), b(client_options());
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    b.set("late", "here");
  });
  EXPECT_EQ(a.get("late", 5000ms), "here");
  a.wait({"late"}, 100ms);
  setter.join();
}

TEST_F(StoreFixture, TimeoutsFire) {
  StoreClient c(client_options());
  auto t = time_of([&] { EXPECT_THROW(c.get("never", 200ms), StoreTimeout); });
  EXPECT_GE(t, 190ms);
  EXPECT_LT(t, 2000ms);
  try {
    c.wait({"x", "never2"}, 150ms);
    FAIL() << "wait should time out";
  } catch (const StoreTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("never2"), std::string::npos) << e.what();
  }
  c.set("x", "1");  // the connection still works after a timeout
  EXPECT_EQ(c.get("x"), "1");
}

TEST_F(StoreFixture, WrongTokenIsRefused) {
  auto opts = client_options();
  opts.token = "not-the-token";
  try {
    StoreClient c(opts);
    FAIL() << "a client without the token must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
  }
  StoreClient good(client_options());  // the server still serves the right token
  good.set("ok", "1");
}

TEST_F(StoreFixture, ConnectingToNothingTimesOut) {
  int port = server.port();
  auto opts = client_options();
  { StoreServer other({.host = "127.0.0.1", .port = 0, .token = token}); opts.port = other.port(); }
  opts.timeout = 300ms;
  auto t = time_of([&] { EXPECT_THROW(StoreClient c(opts), Error); });
  EXPECT_LT(t, 2000ms);
  EXPECT_NE(port, 0);
}

TEST_F(StoreFixture, ServerShutdownWakesWaiters) {
  auto server2 = std::make_unique<StoreServer>(StoreServerOptions{.host = "127.0.0.1", .port = 0, .token = token});
  auto opts = client_options();
  opts.port = server2->port();
  StoreClient c(opts);
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server2.reset();
  });
  auto t = time_of([&] { EXPECT_THROW(c.get("never", 10'000ms), Error); });
  stopper.join();
  EXPECT_LT(t, 5000ms);
}

TEST_F(StoreFixture, ARankThatDiesWithoutGoodbyeIsReported) {
  StoreClient watcher(client_options(0));
  { StoreClient polite(client_options(2)); }  // says goodbye
  pid_t pid = ::fork();
  if (pid == 0) {
    StoreClient c(client_options(1));
    c.set("child", "up");
    ::_exit(0);  // no destructor, no goodbye
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(watcher.get("child", 2000ms), "up");
  std::vector<int> dead;
  for (int i = 0; i < 100 && dead.empty(); ++i) {
    dead = watcher.dead_ranks();
    if (dead.empty()) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(dead, std::vector<int>{1});
  server.clear();
  EXPECT_TRUE(watcher.dead_ranks().empty());
  EXPECT_EQ(watcher.num_keys(), 0);
}

TEST(Store, ServerNeedsAToken) {
  EXPECT_THROW(StoreServer({.host = "127.0.0.1", .port = 0, .token = ""}), Error);
}
