// The replica check (parallel/replica_check.h) inside the trainer, dp = 2 over Gloo: a run whose
// replicas agree passes the check every parallel.replica_check_interval steps, and a run where one
// rank's parameter is perturbed (through the test hook, just before a check) stops with an error
// naming the step, the parameter and the rank that differs.
//
// test_dist re-runs itself under the launcher as `test_dist replica-check-worker <mode> <dir>`; a
// static initialiser below sees those arguments, trains on this rank and exits before
// GoogleTest's main.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "parallel_worker.h"
#include "tiny_trainer_config.h"
#include "trireme/dist/env.h"
#include "trireme/parallel/replica_check.h"
#include "trireme/train/trainer.h"

using namespace trireme;

namespace {

constexpr const char* kPerturbed = "transformer.h.1.mlp.c_fc.weight";

// mode "clean": prints each check it sees; "perturb": adds 1e-3 to one element of kPerturbed on
// rank 1 just before the check after step 4.
int run_replica_worker(const std::string& mode, const std::string& dir) {
  const int rank = dist::dist_env_from_environment().rank;
  try {
    parallel::set_replica_check_hook([&](const parallel::ParallelContext& ctx, int64_t step,
                                         const parallel::NamedParameters& params) {
      std::printf("rank %d: replica check after step %lld\n", rank, static_cast<long long>(step));
      std::fflush(stdout);
      if (mode != "perturb" || ctx.world_rank() != 1 || step != 4) return;
      for (const auto& [name, p] : params) {
        if (name == kPerturbed) p.detach().data<float>()[0] += 1e-3f;
      }
    });
    io::Config config = trireme::testing::tiny_trainer_config(
        dir, 6, 0.0, {"parallel.dp=2", "parallel.replica_check_interval=2", "train.checkpoint_interval=0"});
    train::Trainer(config, {.quiet = true}).run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

struct ReplicaWorkerEntry {
  ReplicaWorkerEntry() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    if (args.size() >= 4 && args[1] == "replica-check-worker") {
      const int rc = run_replica_worker(args[2], args[3]);
      std::fflush(nullptr);
      std::_Exit(rc);
    }
  }
} replica_worker_entry;

dist::LaunchResult run_replica_job(const std::string& mode, const std::string& dir) {
  auto o = dist::testing::quick_job(2, {parallel::testing::self_exe(), "replica-check-worker", mode, dir});
  return dist::launch(o);
}

}  // namespace

TEST(ReplicaCheck, AgreeingReplicasPassEveryCheck) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_replica_clean");
  auto r = run_replica_job("clean", dir);
  const std::string logs = dist::testing::all_logs(r, 2);
  EXPECT_EQ(r.exit_code, 0) << r.message << logs;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step : {2, 4, 6}) {
      EXPECT_NE(logs.find(str_cat("rank ", rank, ": replica check after step ", step, "\n")), std::string::npos)
          << logs;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ReplicaCheck, APerturbedReplicaStopsTheRunNamingRankAndParameter) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_replica_perturb");
  auto r = run_replica_job("perturb", dir);
  const std::string logs = dist::testing::all_logs(r, 2);
  EXPECT_NE(r.exit_code, 0) << logs;
  EXPECT_NE(logs.find(str_cat("replica check after step 4: parameter '", kPerturbed,
                              "' differs between the data-parallel replicas: dp rank 1 (rank 1) holds other values "
                              "than dp rank 0 (rank 0)")),
            std::string::npos)
      << logs;
  EXPECT_EQ(logs.find("replica check after step 2: parameter"), std::string::npos) << logs;  // step 2 agreed
  std::filesystem::remove_all(dir);
}
