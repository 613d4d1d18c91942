// trireme under a real one-node Slurm cluster (scripts/slurm/local_cluster.sh starts munge,
// slurmctld and slurmd in a temp folder): a 4-task `srun trireme train` job in dp2 x tp2 takes
// its ranks and rendezvous from Slurm's variables and trains like one process; `scancel` stops
// every task and leaves a checkpoint that loads; the job resubmitted with --resume ends with the
// losses of an uninterrupted run; a job with the wrong task count is refused with what to change.
// Skips (with the reason) where the cluster cannot start: not root, Slurm or munge missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "slurm_helpers.h"
#include "trireme/train/checkpoint.h"

using namespace trireme;
using namespace trireme::slurm_testing;
using trireme::parallel::testing::read_metrics;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Long enough that scancel lands mid-run; a checkpoint every 4 steps.
constexpr int kSteps = 40;
const std::string kLayout = "--set parallel.dp=2 --set parallel.tp=2";

// Pids of processes whose command line mentions `needle`.
std::set<int> processes_mentioning(const std::string& needle) {
  std::set<int> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos || std::stoi(name) == ::getpid()) continue;
    // A process that exits while it is read makes the read fail (ESRCH), which libstdc++ throws:
    // it is not running, so it is not counted.
    std::string cmdline;
    try {
      std::ifstream f(entry.path() / "cmdline");
      cmdline.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      continue;
    }
    if (cmdline.find(needle) != std::string::npos) pids.insert(std::stoi(name));
  }
  return pids;
}

class SlurmCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("trireme_slurm_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_);
    Result up = run_shell(script() + " start " + (*root_ / "cluster").string() + " 8");
    if (up.status != 0) {
      skip_reason_ = new std::string(up.output.empty() ? "the cluster did not start" : up.output);
      return;
    }
    ::setenv("SLURM_CONF", (*root_ / "cluster" / "slurm.conf").c_str(), 1);
    std::ofstream(*root_ / "tiny.toml") << trireme::parallel::testing::kConfig;
  }
  static void TearDownTestSuite() {
    run_shell(script() + " stop " + (*root_ / "cluster").string());  // every daemon it started
    fs::remove_all(*root_);
    delete root_;
    delete skip_reason_;
    skip_reason_ = nullptr;
  }
  void SetUp() override {
    if (skip_reason_) GTEST_SKIP() << "no Slurm cluster here: " << *skip_reason_;
  }

  static std::string script() { return std::string(TRIREME_SOURCE_DIR) + "/scripts/slurm/local_cluster.sh"; }

  static std::string train_args(const std::string& name, const std::string& extra) {
    return "train -c " + (*root_ / "tiny.toml").string() + " --set train.out_dir=" + (*root_ / name).string() +
           " --set train.steps=" + std::to_string(kSteps) + " --set train.checkpoint_interval=4 " + extra;
  }

  // Writes the batch script for `name` and submits it: --wait blocks until the job ends.
  static Result sbatch(const std::string& name, int tasks, const std::string& extra, bool wait) {
    const fs::path batch = *root_ / (name + ".sbatch");
    std::ofstream(batch) << "#!/bin/bash\n"
                         << "srun --kill-on-bad-exit=1 " << TRIREME_BINARY << " " << train_args(name, extra) << "\n";
    return run_shell("timeout 80 sbatch --parsable --ntasks=" + std::to_string(tasks) +
                     " --output=" + (*root_ / (name + "_%j.out")).string() + " --chdir=" + root_->string() +
                     (wait ? " --wait " : " ") + batch.string());
  }

  static std::string job_output(const std::string& name) {
    std::string all;
    for (const auto& e : fs::directory_iterator(*root_)) {
      if (e.path().filename().string().rfind(name + "_", 0) == 0 && e.path().extension() == ".out") {
        std::ifstream f(e.path());
        all += std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      }
    }
    return all;
  }

  // The one-process run the jobs are compared with (made on first use).
  static const std::vector<trireme::parallel::testing::Step>& single() {
    static std::vector<trireme::parallel::testing::Step> steps;
    if (steps.empty()) {
      Result r = run_shell(std::string(TRIREME_BINARY) + " " + train_args("single", ""));
      EXPECT_EQ(r.status, 0) << r.output;
      steps = read_metrics(*root_ / "single");
    }
    return steps;
  }

  static fs::path* root_;
  static std::string* skip_reason_;
};

fs::path* SlurmCluster::root_ = nullptr;
std::string* SlurmCluster::skip_reason_ = nullptr;

}  // namespace

TEST_F(SlurmCluster, FourTaskJobTrainsLikeOneProcess) {
  Result job = sbatch("dp2tp2", 4, kLayout, true);
  ASSERT_EQ(job.status, 0) << job.output << job_output("dp2tp2");
  const std::string out = job_output("dp2tp2");
  EXPECT_NE(out.find("layout: 4 processes (dp=2 tp=2 pp=1"), std::string::npos) << out;
  expect_same_losses(single(), read_metrics(*root_ / "dp2tp2"), "srun dp2 x tp2");
}

TEST_F(SlurmCluster, ScancelStopsEveryTaskAndTheResubmittedJobResumes) {
  const std::string name = "cancelled";
  Result submitted = sbatch(name, 4, kLayout, false);
  ASSERT_EQ(submitted.status, 0) << submitted.output;
  const std::string job_id = submitted.output.substr(0, submitted.output.find_first_of(";\n"));
  const fs::path checkpoints = *root_ / name / "checkpoints";

  // Cancel once the first checkpoint is written, while the job is still training.
  std::set<int> tasks;
  for (auto until = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < until;) {
    if (fs::exists(checkpoints) && train::find_latest_checkpoint(checkpoints)) {
      tasks = processes_mentioning(*root_ / name);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(tasks.empty()) << "no checkpoint and running tasks within 60 s\n" << job_output(name);
  Result cancel = run_shell("scancel " + job_id);
  ASSERT_EQ(cancel.status, 0) << cancel.output;

  // Every task (and srun) goes: Slurm sends SIGTERM, then SIGKILL after KillWait (2 s here).
  std::set<int> left;
  for (auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
    left = processes_mentioning(*root_ / name);
    if (left.empty() && run_shell("squeue -h -j " + job_id).output.find(job_id) == std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the cancelled job still running";
  std::vector<trireme::parallel::testing::Step> partial = read_metrics(*root_ / name);
  ASSERT_LT(partial.size(), size_t(kSteps)) << "the job finished before scancel; the test needs a longer run";

  auto latest = train::find_latest_checkpoint(checkpoints);
  ASSERT_TRUE(latest.has_value());
  train::Checkpoint ck = train::load_checkpoint(*latest);
  EXPECT_GT(ck.step, 0);

  Result resumed = sbatch(name, 4, kLayout + " --resume", true);
  ASSERT_EQ(resumed.status, 0) << resumed.output << job_output(name);
  EXPECT_NE(job_output(name).find("resume: from"), std::string::npos) << job_output(name);
  expect_same_losses(
      single(), read_metrics(*root_ / name),
      "cancelled at step " + std::to_string(partial.size()) + " and resumed from step " + std::to_string(ck.step));
}

TEST_F(SlurmCluster, ATaskCountThatDoesNotFitTheLayoutIsRefused) {
  Result job = sbatch("three", 3, kLayout, true);
  EXPECT_NE(job.status, 0);
  const std::string out = job_output("three");
  EXPECT_NE(out.find("needs dp x tp x pp = 4 processes, but WORLD_SIZE is 3 (from slurm)"), std::string::npos) << out;
  EXPECT_NE(out.find("--ntasks 4"), std::string::npos) << out;
}
