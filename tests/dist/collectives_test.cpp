// Collectives across 2-4 processes started by the launcher, with closed-form answers; timeouts
// and dead peers become errors that name the op and the rank.
#include "launch_helpers.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

namespace {

LaunchResult run_worker(int nproc, const std::string& scenario) {
  auto o = quick_job(nproc, {TRIREME_DIST_WORKER, scenario});
  return launch(o);
}

}  // namespace

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchClosedFormAnswers) {
  int n = GetParam();
  LaunchResult r = run_worker(n, "collectives");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, n);
}

TEST_P(Collectives, ByDeviceGroupDispatchesCpuTensorsToGloo) {
  int n = GetParam();
  LaunchResult r = run_worker(n, "by_device");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, n);
}

INSTANTIATE_TEST_SUITE_P(Dist, Collectives, ::testing::Values(2, 3, 4));

TEST(Collectives, TimeoutsFireAndNameTheOp) {
  LaunchResult r = run_worker(2, "timeout");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 2);
}

TEST(Collectives, ADeadPeerIsAnErrorNamingItsRank) {
  LaunchResult r = run_worker(3, "peer_dies");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 3);
}

TEST(Collectives, AKilledWorkerFailsTheLaunchFastNamingTheRank) {
  LaunchResult r;
  double s = seconds_of([&] { r = run_worker(3, "die"); });
  EXPECT_LT(s, 10.0);
  EXPECT_EQ(r.failed_rank, 1) << r.message << "\n" << all_logs(r, 3);
  EXPECT_NE(r.message.find("rank 1 "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("SIGKILL"), std::string::npos) << r.message;
  auto pids = pids_in_logs(r, 3);
  EXPECT_EQ(pids.size(), 3u);
  for (int pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
}
