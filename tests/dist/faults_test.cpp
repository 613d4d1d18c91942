// Faults, each repeated and required to hold every time: a rank SIGKILLed or SIGSTOPped in the
// middle of a loop of all-reduces, the store's port already taken, workers that disagree on
// WORLD_SIZE. Every one must end fast, name what went wrong, and leave no process behind.
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "expect_error.h"
#include "launch_helpers.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

namespace {

constexpr int kRepeats = 5;

// Waits (up to 10 s) until every rank's log says `word`; returns the pids they printed, by rank.
std::vector<int> wait_for_logs(const std::string& log_dir, int nproc, const std::string& word) {
  LaunchResult so_far;
  so_far.log_dir = log_dir;
  for (int i = 0; i < 500; ++i) {
    std::string logs = all_logs(so_far, nproc);
    size_t count = 0;
    for (size_t at = logs.find(word); at != std::string::npos; at = logs.find(word, at + 1)) ++count;
    if (count >= static_cast<size_t>(nproc)) return pids_in_logs(so_far, nproc);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

}  // namespace

TEST(Faults, ASigkilledRankInALoopOfAllReducesFailsTheLaunchNamingIt) {
  std::mt19937 random(12345);
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    const int n = 3;
    int victim = static_cast<int>(random() % n);
    auto o = quick_job(n, {TRIREME_DIST_WORKER, "loop", "10000"});
    std::vector<int> pids;
    std::chrono::steady_clock::time_point killed_at;
    std::thread killer([&] {
      pids = wait_for_logs(o.log_dir, n, "looping");
      if (pids.size() != static_cast<size_t>(n)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % 150));  // mid-loop
      killed_at = std::chrono::steady_clock::now();
      ::kill(pids[static_cast<size_t>(victim)], SIGKILL);
    });
    LaunchResult r = launch(o);
    auto returned_at = std::chrono::steady_clock::now();
    killer.join();
    ASSERT_EQ(pids.size(), static_cast<size_t>(n)) << "repeat " << repeat << "\n" << all_logs(r, n);
    double after_kill = std::chrono::duration<double>(returned_at - killed_at).count();
    EXPECT_LT(after_kill, 2.0 + 3.0) << "repeat " << repeat;  // the grace, plus a few seconds
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.failed_rank, victim) << "repeat " << repeat << ": " << r.message;
    EXPECT_NE(r.message.find("rank " + std::to_string(victim) + " "), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("SIGKILL"), std::string::npos) << r.message;
    for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << "repeat " << repeat << ": pid " << pid << " is still there";
  }
}

TEST(Faults, ASigstoppedRankTimesOutTheOthersNamingTheGroupAndOp) {
  std::mt19937 random(777);
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    const int n = 3;
    int victim = static_cast<int>(random() % n);
    auto o = quick_job(n, {TRIREME_DIST_WORKER, "loop", "800"});
    o.grace = std::chrono::milliseconds(300);
    std::vector<int> pids;
    std::thread stopper([&] {
      pids = wait_for_logs(o.log_dir, n, "looping");
      if (pids.size() != static_cast<size_t>(n)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % 100));
      ::kill(pids[static_cast<size_t>(victim)], SIGSTOP);
    });
    LaunchResult r;
    double s = seconds_of([&] { r = launch(o); });
    stopper.join();
    ASSERT_EQ(pids.size(), static_cast<size_t>(n)) << "repeat " << repeat << "\n" << all_logs(r, n);
    // Cleanup first, so a failed check leaves nothing stopped behind.
    ::kill(pids[static_cast<size_t>(victim)], SIGCONT);
    ::kill(pids[static_cast<size_t>(victim)], SIGKILL);
    EXPECT_LT(s, 10.0) << "repeat " << repeat;
    EXPECT_EQ(r.exit_code, 3) << "repeat " << repeat << ": " << r.message;
    EXPECT_NE(r.failed_rank, victim) << r.message;  // a survivor reports the timeout
    EXPECT_NE(r.message.find("timed out after 800 ms"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("all_reduce(avg"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("gloo group 'world'"), std::string::npos) << r.message;
    for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << "repeat " << repeat << ": pid " << pid;
  }
}

TEST(Faults, TheStorePortAlreadyInUseIsAClearError) {
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    int port = ntohs(addr.sin_port);
    auto o = quick_job(2, {"true"});
    o.master_port = port;
    trireme::testing::expect_error([&] { launch(o); },
                                   {"127.0.0.1:" + std::to_string(port), "already in use", "--master-port"});
    ::close(fd);
  }
}

TEST(Faults, WorkersWithDifferentWorldSizesFailClearly) {
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    auto o = quick_job(2, {"sh", "-c", std::string("if [ \"$RANK\" = 1 ]; then export WORLD_SIZE=3; fi; exec ") +
                                           TRIREME_DIST_WORKER + " collectives"});
    LaunchResult r;
    double s = seconds_of([&] { r = launch(o); });
    EXPECT_LT(s, 5.0) << "repeat " << repeat;
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.message.find("WORLD_SIZE"), std::string::npos) << r.message << "\n" << all_logs(r, 2);
    EXPECT_NE(r.message.find("group of"), std::string::npos) << r.message;
    for (int pid : pids_in_logs(r, 2)) EXPECT_TRUE(process_gone(pid)) << pid;
  }
}
