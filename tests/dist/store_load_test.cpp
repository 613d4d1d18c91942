// The store under a hostile load on loopback: 500 hostile connections (idle, junk, oversized
// length prefixes, slowloris) and 100 MiB of junk in total, while a 4-rank job rendezvouses
// through it. The job must finish about as fast as on a quiet store, and the store's memory must
// stay small (Note [store under abuse]).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <random>
#include <thread>

#include "store_process.h"
#include "trireme/dist/store.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;
using namespace std::chrono_literals;

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kRanks = 4;
constexpr int kRounds = 20;

// What a real rendezvous does, kRounds times: publish an address, count arrivals, wait for
// everyone's address, read them, then a barrier.
void rendezvous(int port, const std::string& token) {
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        StoreClient s({.host = "127.0.0.1", .port = port, .token = token, .rank = rank, .timeout = 20'000ms});
        for (int round = 0; round < kRounds; ++round) {
          std::string prefix = "r" + std::to_string(round) + "/";
          s.set(prefix + "addr/" + std::to_string(rank), "10.0.0." + std::to_string(rank) + ":1234");
          s.add(prefix + "arrived", 1);
          std::vector<std::string> keys;
          for (int r = 0; r < kRanks; ++r) keys.push_back(prefix + "addr/" + std::to_string(r));
          s.wait(keys);
          for (const auto& k : keys) EXPECT_FALSE(s.get(k).empty());
          if (s.add(prefix + "barrier", 1) == kRanks) s.set(prefix + "go", "1");
          s.wait({prefix + "go"});
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
}

double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// One thread driving every hostile connection through non-blocking sockets; a connection the
// store closes is reopened after a pause, so the pressure lasts.
class Attacker {
 public:
  enum class Kind { kIdle, kJunk, kOversized, kSlowloris };

  Attacker(int port, int connections, size_t junk_goal) : port_(port), junk_goal_(junk_goal) {
    for (int i = 0; i < connections; ++i) {
      Slot s;
      s.kind = static_cast<Kind>(i % 4);
      // Spread over loopback addresses as attackers on a network would be; a few share the
      // job's own address.
      s.source = (i % 10 == 0) ? "127.0.0.1" : "127.0.0." + std::to_string(2 + i % 20);
      slots_.push_back(s);
    }
    std::mt19937 rng(7);
    junk_.resize(64 << 10);
    for (auto& c : junk_) c = static_cast<char>(rng());
    thread_ = std::thread([this] { run(); });
  }
  ~Attacker() {
    stop_ = true;
    thread_.join();
    for (auto& s : slots_)
      if (s.fd >= 0) ::close(s.fd);
  }

  size_t junk_sent() const { return junk_sent_; }
  int opened() const { return opened_; }
  int open_now() const { return open_now_; }

 private:
  struct Slot {
    Kind kind;
    std::string source;
    int fd = -1;
    SteadyClock::time_point next{};  // reopen or next slowloris byte
    size_t progress = 0;
  };

  int open(const std::string& source) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port_));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void drop(Slot& s, SteadyClock::time_point now) {
    ::close(s.fd);
    s.fd = -1;
    s.next = now + 200ms;
  }

  void act(Slot& s, SteadyClock::time_point now) {
    static const std::string kOversized("\x01\x00\x00\x00\xff\xff\xff\x3f", 8);
    static const std::string kHandshakeStart = frame_bytes({"trireme-store/1", std::string(32, 'x'), "0"});
    ssize_t k = 0;
    switch (s.kind) {
      case Kind::kIdle:
        return;
      case Kind::kOversized:
        if (s.progress >= kOversized.size()) return;
        k = ::send(s.fd, kOversized.data() + s.progress, kOversized.size() - s.progress, MSG_NOSIGNAL);
        break;
      case Kind::kSlowloris:
        if (now < s.next) return;
        s.next = now + 200ms;
        k = ::send(s.fd, kHandshakeStart.data() + s.progress % kHandshakeStart.size(), 1, MSG_NOSIGNAL);
        break;
      case Kind::kJunk:
        if (junk_sent_ >= junk_goal_) return;
        k = ::send(s.fd, junk_.data(), junk_.size(), MSG_NOSIGNAL);
        if (k > 0) junk_sent_ += static_cast<size_t>(k);
        break;
    }
    if (k > 0) s.progress += static_cast<size_t>(k);
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) drop(s, now);
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<Slot*> owners;
    while (!stop_) {
      auto now = SteadyClock::now();
      fds.clear();
      owners.clear();
      int open_count = 0;
      for (auto& s : slots_) {
        if (s.fd < 0 && now >= s.next) {
          s.fd = open(s.source);
          s.progress = 0;
          s.next = now;
          if (s.fd >= 0) ++opened_;
        }
        if (s.fd < 0) continue;
        ++open_count;
        act(s, now);
        if (s.fd < 0) continue;
        fds.push_back({s.fd, POLLIN, 0});
        owners.push_back(&s);
      }
      open_now_ = open_count;
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      now = SteadyClock::now();
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        char buf[256];
        ssize_t n = ::recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) drop(*owners[i], now);
      }
    }
  }

  int port_;
  size_t junk_goal_;
  std::vector<Slot> slots_;
  std::string junk_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> junk_sent_{0};
  std::atomic<int> opened_{0};
  std::atomic<int> open_now_{0};
};

}  // namespace

TEST(StoreLoad, ARendezvousCompletesUnderHostileLoadAndMemoryStaysSmall) {
  // 500 hostile connections here and as many accepted by the store (a child process).
  long fd_limit = raise_fd_limit();
  int hostile = static_cast<int>(std::min<long>(500, fd_limit - 100));
  if (hostile < 500) std::cerr << "open-file limit " << fd_limit << ": scaled to " << hostile << " connections\n";
  constexpr size_t kJunkGoal = size_t(100) << 20;

  std::string token = store_make_token();
  StoreProcess store({.host = "127.0.0.1", .port = 0, .token = token});

  auto quiet_start = SteadyClock::now();
  rendezvous(store.port(), token);
  double quiet = seconds_since(quiet_start);
  long rss_before = store.status_kib("VmRSS");

  double loaded = 0;
  size_t junk = 0;
  {
    Attacker attacker(store.port(), hostile, kJunkGoal);
    // Let the attack build up before the job starts.
    for (int i = 0; i < 100 && attacker.open_now() < hostile; ++i) std::this_thread::sleep_for(20ms);
    auto loaded_start = SteadyClock::now();
    rendezvous(store.port(), token);
    loaded = seconds_since(loaded_start);
    auto give_up = SteadyClock::now() + 30s;
    while (attacker.junk_sent() < kJunkGoal && SteadyClock::now() < give_up) std::this_thread::sleep_for(20ms);
    junk = attacker.junk_sent();
    std::cerr << "hostile connections opened: " << attacker.opened() << ", junk sent: " << (junk >> 20) << " MiB\n";
    EXPECT_GE(attacker.opened(), hostile);
  }
  long hwm = store.status_kib("VmHWM");
  std::cerr << "rendezvous: " << quiet << " s quiet, " << loaded << " s under attack; store RSS " << rss_before / 1024
            << " MiB before, peak " << hwm / 1024 << " MiB\n";
  EXPECT_GE(junk, kJunkGoal);
  // The bounds (within 2 s of a quiet start, under 64 MiB): the old server (a thread per
  // connection believing every length) stalled clients for over 10 s and allocated GiBs.
  EXPECT_LT(loaded, quiet + 2.0);
  EXPECT_LT(hwm - rss_before, 64 * 1024) << "the store grew by " << (hwm - rss_before) / 1024 << " MiB";

  // And it still serves.
  StoreClient after({.host = "127.0.0.1", .port = store.port(), .token = token, .timeout = 5000ms});
  after.set("after", "1");
  EXPECT_EQ(after.get("after"), "1");
}
