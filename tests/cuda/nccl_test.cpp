// ProcessGroupNccl across 2 processes on 2 GPUs, started by the launcher: closed-form answers
// for every collective and dtype, async ops, a timeout and a lost peer that become errors
// naming the op and the rank. Skips (green) without 2 usable GPUs or without NCCL in the build.
#include <cstdlib>
#include <optional>

#include "dist/launch_helpers.h"
#include "expect_error.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/process_group_nccl.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

#define TRIREME_REQUIRE_NCCL_AND_TWO_GPUS()                                                                 \
  do {                                                                                                      \
    if (!nccl_is_built()) GTEST_SKIP() << "trireme was built without NCCL (TRIREME_WITH_NCCL is off)";     \
    if (int n = cuda::device_count(); n < 2)                                                                \
      GTEST_SKIP() << "the NCCL tests need 2 usable GPUs; found " << n                                      \
                   << (n == 0 ? " (" + cuda::unavailable_reason() + ")" : std::string());                   \
  } while (0)

namespace {

// Runs a scenario of the worker on 2 GPUs; the workers' logs go to the test's output (they show
// the errors and how long they took).
LaunchResult run_worker(const std::string& scenario) {
  auto o = quick_job(2, {TRIREME_NCCL_WORKER, scenario});
  LaunchResult r = launch(o);
  std::printf("%s", all_logs(r, 2).c_str());
  return r;
}

}  // namespace

TEST(Nccl, CollectivesMatchClosedFormAnswersForEveryDtype) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r = run_worker("collectives");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 2);
}

// Note [peer all-reduce]: sums and averages through the copy engines equal NCCL's, bit for bit,
// and so do its reduce-scatter, all-gather and staged reduce-scatter (Note [staged
// reduce-scatter]); an op issued inside a staged one is an error.
TEST(Nccl, PeerAllReduceGivesNcclsBits) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r = run_worker("peer_all_reduce");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 2);
}

// Note [nccl send/recv]: transfers started alone arrive in any order of posting that both ranks
// share; queued into one group, a send waits for a recv it was paired with, and both ranks hang
// (the worker expects the timeouts).
TEST(Nccl, TransfersStartedAloneDoNotWaitForOthersOfTheirGroup) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult alone = run_worker("p2p_alone");
  EXPECT_EQ(alone.exit_code, 0) << alone.message << "\n" << all_logs(alone, 2);
  LaunchResult queued = run_worker("p2p_queued");
  EXPECT_EQ(queued.exit_code, 0) << queued.message << "\n" << all_logs(queued, 2);
  EXPECT_NE(all_logs(queued, 2).find("error as expected"), std::string::npos) << all_logs(queued, 2);
}

TEST(Nccl, ASkippedCollectiveTimesOutNamingTheOp) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r;
  double s = seconds_of([&] { r = run_worker("timeout"); });
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 2);
  EXPECT_LT(s, 60.0);
  std::string logs = all_logs(r, 2);
  EXPECT_NE(logs.find("timed out after 500 ms"), std::string::npos) << logs;
}

TEST(Nccl, ADeadPeerIsAnErrorNamingItsRank) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r = run_worker("peer_dies");
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, 2);
}

TEST(Nccl, AKilledWorkerFailsTheLaunchNamingTheRank) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r;
  double s = seconds_of([&] { r = run_worker("die"); });
  EXPECT_LT(s, 30.0);
  EXPECT_EQ(r.failed_rank, 1) << r.message << "\n" << all_logs(r, 2);
  EXPECT_NE(r.message.find("rank 1 "), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("SIGKILL"), std::string::npos) << r.message;
  for (int pid : pids_in_logs(r, 2)) EXPECT_TRUE(process_gone(pid)) << pid;
}

// A rank that throws with a collective in flight exits at once (its group aborts instead of
// waiting out the 20 s op timeout), and the launcher blames it.
TEST(Nccl, ARankThatThrowsWithAnOpInFlightExitsAtOnce) {
  TRIREME_REQUIRE_NCCL_AND_TWO_GPUS();
  LaunchResult r;
  double s = seconds_of([&] { r = run_worker("throws"); });
  EXPECT_LT(s, 15.0) << all_logs(r, 2);
  EXPECT_EQ(r.failed_rank, 1) << r.message << "\n" << all_logs(r, 2);
  EXPECT_NE(all_logs(r, 2).find("fails on purpose"), std::string::npos) << all_logs(r, 2);
  EXPECT_NE(all_logs(r, 2).find("still running when an error ended this rank"), std::string::npos) << all_logs(r, 2);
}

// The rest runs on any machine.

TEST(Nccl, AutoPicksNcclOnlyWithNcclAndAGpu) {
  std::string expected = nccl_is_built() && cuda::is_available() ? "nccl" : "gloo";
  EXPECT_EQ(resolve_backend("auto"), expected);
  EXPECT_EQ(resolve_backend("gloo"), "gloo");
  EXPECT_EQ(resolve_backend("nccl"), "nccl");
  trireme::testing::expect_error([] { resolve_backend("mpi"); }, "unknown backend 'mpi'");
}

TEST(Nccl, WithoutNcclOrAGpuTheGroupIsAClearError) {
  if (nccl_is_built() && cuda::is_available()) GTEST_SKIP() << "NCCL and a GPU are here: nothing to refuse";
  std::string token = store_make_token();
  StoreServer server({.token = token});
  auto store = std::make_shared<StoreClient>(StoreClientOptions{.port = server.port(), .token = token, .rank = 0});
  try {
    make_process_group("nccl", store, 0, 1);
    ADD_FAILURE() << "an nccl group should not be made here";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_TRUE(what.find("without NCCL") != std::string::npos || what.find("usable GPU") != std::string::npos)
        << what;
  }
  // "auto" falls back to gloo here.
  auto group = make_process_group("auto", store, 0, 1);
  EXPECT_EQ(group->backend_name(), "gloo");
}

TEST(Nccl, TheLauncherTurnsNvlsOffUnlessTheUserSetIt) {
  const char* saved = std::getenv("NCCL_NVLS_ENABLE");
  std::optional<std::string> previous = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::unsetenv("NCCL_NVLS_ENABLE");
  LaunchResult off = launch(quick_job(1, {"/bin/sh", "-c", "test \"$NCCL_NVLS_ENABLE\" = 0"}));
  ::setenv("NCCL_NVLS_ENABLE", "00", 1);  // still off (NVLS stays off on GPU machines), but not the default spelling
  LaunchResult kept = launch(quick_job(1, {"/bin/sh", "-c", "test \"$NCCL_NVLS_ENABLE\" = 00"}));
  if (previous) ::setenv("NCCL_NVLS_ENABLE", previous->c_str(), 1);
  else ::unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_EQ(off.exit_code, 0) << off.message;
  EXPECT_EQ(kept.exit_code, 0) << kept.message;
}
