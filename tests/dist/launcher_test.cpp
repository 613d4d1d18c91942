// The launcher with small shell jobs: failures named fast, signals, grace, restarts, logs,
// Ctrl-C, and no process left behind.
#include <thread>
#include <unistd.h>

#include "launch_helpers.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

TEST(Launcher, AllSucceedAndLogsHaveEachRanksOutput) {
  auto o = quick_job(2, {"sh", "-c", "echo out-$RANK-of-$WORLD_SIZE; echo err-$LOCAL_RANK >&2"});
  LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.failed_rank, -1);
  for (int rank = 0; rank < 2; ++rank) {
    std::string log = read_file(o.log_dir + "/rank_" + std::to_string(rank) + ".log");
    EXPECT_NE(log.find("out-" + std::to_string(rank) + "-of-2"), std::string::npos) << log;
    EXPECT_NE(log.find("err-" + std::to_string(rank)), std::string::npos) << log;
  }
}

TEST(Launcher, AFailingRankStopsTheOthersAndIsNamed) {
  auto o = quick_job(3, {"sh", "-c",
                         "echo starting $RANK; if [ \"$RANK\" = 1 ]; then echo boom on $RANK; exit 3; fi; exec sleep 30"});
  LaunchResult r;
  double s = seconds_of([&] { r = launch(o); });
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.message.find("rank 1 "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("exited with code 3"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("boom on 1"), std::string::npos) << r.message;  // the tail of its log
}

TEST(Launcher, AKilledRankIsNamedWithItsSignal) {
  // Rank 2 kills itself once every rank has printed its pid (each touches a file in `ready`).
  std::string ready = fresh_dir();
  auto o = quick_job(3, {"sh", "-c",
                         "echo pid=$$; touch " + ready + "/$RANK; if [ \"$RANK\" = 2 ]; then "
                         "while [ $(ls " + ready + " | wc -l) -lt 3 ]; do sleep 0.01; done; kill -9 $$; fi; "
                         "exec sleep 30"});
  LaunchResult r;
  double s = seconds_of([&] { r = launch(o); });
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(r.failed_rank, 2);
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_NE(r.message.find("rank 2 "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("SIGKILL"), std::string::npos) << r.message;
  auto pids = pids_in_logs(r, 3);
  EXPECT_EQ(pids.size(), 3u) << all_logs(r, 3);
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(Launcher, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  auto o = quick_job(2, {"sh", "-c", "trap '' TERM; echo pid=$$; if [ \"$RANK\" = 0 ]; then sleep 0.2; exit 1; fi; "
                                     "while true; do sleep 0.05; done"});
  o.grace = std::chrono::milliseconds(300);
  LaunchResult r;
  double s = seconds_of([&] { r = launch(o); });
  EXPECT_LT(s, 4.0);
  EXPECT_EQ(r.failed_rank, 0);
  for (int pid : pids_in_logs(r, 2)) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(Launcher, MaxRestartsRestartsTheWholeGroup) {
  std::vector<std::string> cmd = {"sh", "-c", "[ \"$TRIREME_RESTART_COUNT\" -ge 1 ] || exit 5"};
  auto once = quick_job(2, cmd);
  LaunchResult r0 = launch(once);
  EXPECT_EQ(r0.exit_code, 5);
  auto again = quick_job(2, cmd);
  again.max_restarts = 2;
  LaunchResult r1 = launch(again);
  EXPECT_EQ(r1.exit_code, 0) << r1.message;
  EXPECT_EQ(r1.restarts, 1);
}

TEST(Launcher, CtrlCStopsEverythingIncludingGrandchildren) {
  auto o = quick_job(2, {TRIREME_DIST_WORKER, "sleep"});
  std::thread interrupter([&] {
    // Once both workers have started their child (or after 10 s), press Ctrl-C.
    LaunchResult so_far;
    so_far.log_dir = o.log_dir;
    for (int i = 0; i < 500 && pids_in_logs(so_far, 2).size() < 4; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::kill(::getpid(), SIGINT);
  });
  LaunchResult r;
  double s = seconds_of([&] { r = launch(o); });
  interrupter.join();
  EXPECT_LT(s, 12.0);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.message;
  auto pids = pids_in_logs(r, 2);
  EXPECT_EQ(pids.size(), 4u) << all_logs(r, 2);  // two workers, each with a child
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(Launcher, WorkersGetTheRankEnvironment) {
  auto o = quick_job(3, {TRIREME_DIST_WORKER, "env"});
  LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 0) << r.message << all_logs(r, 3);
}

TEST(Launcher, BadOptionsAreErrors) {
  EXPECT_THROW(launch(quick_job(0, {"true"})), Error);
  EXPECT_THROW(launch(quick_job(1, {})), Error);
  EXPECT_THROW(launch(quick_job(1, {"no-such-program-trireme"})), Error);
  auto multi = quick_job(1, {"true"});
  multi.nnodes = 2;
  EXPECT_THROW(launch(multi), Error);  // needs --master-port
}

TEST(Launcher, ParsesTorchrunStyleArguments) {
  LaunchOptions o = launch_parse_args({"--nnodes", "2", "--nproc_per_node=4", "--node-rank", "1", "--master-addr",
                                       "10.1.2.3", "--master-port=29500", "--max-restarts", "3", "--log-dir", "/tmp/x",
                                       "--", "train", "--lr", "0.1"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.1.2.3");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.command, (std::vector<std::string>{"train", "--lr", "0.1"}));
  EXPECT_EQ(launch_parse_args({"--nproc-per-node", "2", "prog", "a"}).command, (std::vector<std::string>{"prog", "a"}));
  EXPECT_THROW(launch_parse_args({"--bogus", "1", "--", "x"}), Error);
  EXPECT_THROW(launch_parse_args({"--nnodes", "two", "--", "x"}), Error);
}
