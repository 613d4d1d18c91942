// `trireme train --nproc N --max-restarts K`: a rank killed (SIGKILL) at a random step stops
// the group, the launcher restarts all ranks, they resume from the latest checkpoint, and after
// five such losses the run ends with the losses of one that never failed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "slurm_helpers.h"

using namespace trireme::slurm_testing;
using trireme::parallel::testing::read_metrics;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr int kSteps = 36;
constexpr int kKills = 5;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The workers of launcher `parent`: its children that run `train` without --nproc (the
// launcher's watchdog is a fork of the launcher, so it still shows --nproc).
std::set<int> workers_of(int parent) {
  std::set<int> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(entry.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent || state == 'Z') continue;
    const std::string cmdline = slurp(entry.path() / "cmdline");
    if (cmdline.find("train") != std::string::npos && cmdline.find("--nproc") == std::string::npos) {
      pids.insert(std::stoi(name));
    }
  }
  return pids;
}

// The last step in a metrics file being written (0 when none yet).
int last_step(const fs::path& metrics) {
  std::ifstream f(metrics);
  int last = 0;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step")) last = j["step"].get<int>();
  }
  return last;
}

}  // namespace

TEST(LostRankRestart, FiveKilledRanksEndWithTheLossesOfAnUninterruptedRun) {
  const fs::path root = fs::temp_directory_path() / ("trireme_restart_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::ofstream(root / "tiny.toml") << trireme::parallel::testing::kConfig;
  auto train = [&](const std::string& name) {
    return std::string(TRIREME_BINARY) + " train -c " + (root / "tiny.toml").string() +
           " --set train.out_dir=" + (root / name).string() + " --set train.steps=" + std::to_string(kSteps) +
           " --set train.checkpoint_interval=3 --set parallel.dp=2 --nproc 2";
  };
  Result ref = run_shell(train("uninterrupted"));
  ASSERT_EQ(ref.status, 0) << ref.output;

  const fs::path log = root / "restarted.log";
  pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const std::string cmd =
        "exec " + train("restarted") + " --max-restarts " + std::to_string(kKills) + " >" + log.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }

  std::random_device seed;
  const unsigned s = seed();
  std::mt19937 rng(s);
  std::set<int> killed;
  std::string kills;
  const fs::path metrics = root / "restarted" / "metrics.jsonl";
  for (int k = 0; k < kKills; ++k) {
    // A random step in the k-th sixth of the run, so every kill lands before the end.
    const int target = (k + 1) * kSteps / (kKills + 1) + int(rng() % 3);
    bool fired = false;
    for (auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until && !fired;) {
      std::set<int> workers = workers_of(launcher);
      bool fresh =
          workers.size() == 2 && std::none_of(workers.begin(), workers.end(), [&](int p) { return killed.count(p); });
      if (fresh && last_step(metrics) >= target) {
        auto it = workers.begin();
        std::advance(it, rng() % workers.size());
        ::kill(*it, SIGKILL);
        killed.insert(*it);
        kills += " " + std::to_string(last_step(metrics));
        fired = true;
      } else {
        std::this_thread::sleep_for(5ms);
      }
    }
    if (!fired) {
      ::kill(launcher, SIGTERM);
      ::waitpid(launcher, nullptr, 0);
      FAIL() << "kill " << k + 1 << " (step " << target << ") never came; seed " << s << "\n" << slurp(log);
    }
  }
  int status = 0;
  ::waitpid(launcher, &status, 0);
  const std::string out = slurp(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "seed " << s << ", kills at" << kills << "\n" << out;
  EXPECT_NE(out.find("restart " + std::to_string(kKills) + " of " + std::to_string(kKills)), std::string::npos) << out;
  EXPECT_NE(out.find("resume: from"), std::string::npos) << out;
  expect_same_losses(read_metrics(root / "uninterrupted"), read_metrics(root / "restarted"),
                     "killed at" + kills + " (seed " + std::to_string(s) + ")");
  std::printf("[ restarts ] a rank killed at steps%s (seed %u); final losses match the uninterrupted run\n",
              kills.c_str(), s);
  fs::remove_all(root);
}

TEST(LostRankRestart, MaxRestartsWithoutNprocIsRefused) {
  Result r = run_shell(std::string(TRIREME_BINARY) +
                       " train --max-restarts 2 --set train.steps=1 --set schedule.warmup_steps=0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--max-restarts restarts the ranks that --nproc starts; add --nproc N"), std::string::npos)
      << r.output;
}
