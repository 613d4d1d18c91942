// `trireme train` and the runs in train.out_dir, through the binary: an earlier run is refused
// (exit 2, one line saying what to do) unless --overwrite; a finished run's --resume exits 0
// without training; a folder in use is refused naming the pid; --nproc N alone means dp = N;
// a trainer killed with SIGKILL mid-run resumes to the same losses with no partial metrics line.
#include <gtest/gtest.h>

#include "run_command.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "tiny_trainer_config.h"
#include "trireme/io/file_write.h"
#include "trireme/train/metrics.h"
#include "trireme/train/run_dir.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

using trireme::cli_testing::Result;
Result trireme_cli(const std::string& args) { return trireme::cli_testing::run(args); }

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class RunOwnership : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(trireme::testing::fresh_run_dir("trireme_run_ownership"));
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A config file for the tiny GPT writing into root_/name; returns "-c FILE".
  std::string config(const std::string& name, int64_t steps, const std::vector<std::string>& extra = {}) {
    const fs::path file = root_ / (name + ".toml");
    io::write_file(file, trireme::testing::tiny_trainer_config((root_ / name).string(), steps, 0.1, extra).to_toml());
    return "-c " + file.string();
  }

  fs::path root_;
};

}  // namespace

TEST_F(RunOwnership, AnEarlierRunIsRefusedWithExit2UnlessOverwrite) {
  const std::string cfg = config("run", 10);
  ASSERT_EQ(trireme_cli("train " + cfg).status, 0);
  Result again = trireme_cli("train " + cfg);
  EXPECT_EQ(again.status, 2) << again.out;
  EXPECT_EQ(count_lines(again.out), 1) << again.out;
  EXPECT_NE(again.out.find("use --resume to continue, --overwrite to start over, or another train.out_dir"),
            std::string::npos)
      << again.out;
  EXPECT_TRUE(fs::exists(root_ / "run" / "checkpoints" / "step_00000010"));

  Result over = trireme_cli("train " + cfg + " --overwrite");
  EXPECT_EQ(over.status, 0) << over.out;
  EXPECT_NE(over.out.find("overwrite: removed"), std::string::npos) << over.out;
  EXPECT_EQ(train::read_metrics((root_ / "run" / "metrics.jsonl").string()).size(), 10u);
}

TEST_F(RunOwnership, ResumingAFinishedRunSaysSoAndExits0) {
  const std::string cfg = config("done", 10);
  ASSERT_EQ(trireme_cli("train " + cfg).status, 0);
  Result r = trireme_cli("train " + cfg + " --resume");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("the run in " + (root_ / "done").string() +
                       " already finished at step 10; raise train.steps to continue"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("summary:"), std::string::npos) << r.out;
}

TEST_F(RunOwnership, AFolderInUseIsRefusedNamingThePid) {
  const std::string cfg = config("busy", 10);
  fs::create_directories(root_ / "busy");
  train::RunLock held(root_ / "busy");
  Result r = trireme_cli("train " + cfg);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("pid " + std::to_string(::getpid())), std::string::npos) << r.out;
  r = trireme_cli("train " + cfg + " --nproc 2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("pid " + std::to_string(::getpid())), std::string::npos) << r.out;
}

TEST_F(RunOwnership, NprocAloneMeansDataParallel) {
  Result r = trireme_cli("train " + config("dp", 6) + " --nproc 2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dp = 2"), std::string::npos) << r.out;
  const auto state = nlohmann::json::parse(io::read_file(root_ / "dp" / "checkpoints" / "step_00000006" / "state.json"));
  EXPECT_EQ(state["world_size"], 2);
  EXPECT_EQ(state["layout"]["dp"], 2);
}

TEST_F(RunOwnership, ATrainerKilledMidRunResumesToTheSameLosses) {
  // A constant learning rate, so the killed run (endless) and the resumed one (a few steps
  // past the kill) train the same steps the same way.
  const std::vector<std::string> constant = {"schedule.kind=constant"};
  const std::string endless = config("killed", 1000000, constant);
  const fs::path metrics = root_ / "killed" / "metrics.jsonl";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    const std::string file = endless.substr(3);
    ::execl(TRIREME_BINARY, TRIREME_BINARY, "train", "-c", file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Past the second checkpoint (every 10 steps), then SIGKILL wherever it is.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (fs::exists(metrics, ec) && count_lines(io::read_file(metrics)) >= 25) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the trainer ended before it was killed";

  const std::vector<nlohmann::json> before = train::read_metrics(metrics.string());
  const int64_t reached = before.back()["step"].get<int64_t>();
  Result r = trireme_cli("train " + config("killed", reached + 5, constant) + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;

  const std::string text = io::read_file(metrics);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::vector<nlohmann::json> after = train::read_metrics(metrics.string());  // throws on a partial line
  ASSERT_EQ(int64_t(after.size()), reached + 5);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i]["step"], int64_t(i + 1));
    if (i < before.size()) {
      EXPECT_EQ(after[i]["loss"].get<double>(), before[i]["loss"].get<double>()) << "step " << i + 1;
    }
  }
}
