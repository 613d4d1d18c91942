// Runs a user owns are never lost or overwritten: a damaged `latest` pointer resumes from the
// newest complete checkpoint (same losses as an uninterrupted run), a resume never restarts from
// step 0 over checkpoints, a fresh run never writes over an earlier one without --overwrite, a
// finished run is not trained again, two trainers never share a folder, and a full disk stops
// the run with an error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "tiny_trainer_config.h"
#include "trireme/core/error.h"
#include "trireme/io/file_write.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/metrics.h"
#include "trireme/train/run_dir.h"
#include "trireme/train/trainer.h"

using namespace trireme;
using namespace trireme::train;
namespace fs = std::filesystem;

namespace {

io::Config config(const fs::path& out_dir, int64_t steps) {
  return trireme::testing::tiny_trainer_config(out_dir.string(), steps, 0.1, {"optim.lr=1e-2"});
}

// One uninterrupted 30-step run and one stopped at step 20 (checkpoints 10 and 20), shared by
// the tests of this file: each copies the stopped run and damages the copy.
class ResumeSafety : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(trireme::testing::fresh_run_dir("trireme_resume_safety"));
    full_ = Trainer(config(root_ / "full", 30), {.quiet = true}).run().losses;
    Trainer(config(root_ / "stopped", 30), {.quiet = true, .stop_after = 20}).run();
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static fs::path copy_of_stopped(const std::string& name) {
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    fs::copy(root_ / "stopped", dir, fs::copy_options::recursive);
    fs::remove(dir / ".lock");
    return dir;
  }
  static std::vector<double> full_from(size_t step) { return {full_.begin() + long(step), full_.end()}; }

  static fs::path root_;
  static std::vector<double> full_;
};
fs::path ResumeSafety::root_;
std::vector<double> ResumeSafety::full_;

std::string refusal_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RunRefused& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(ResumeSafety, AnUnusablePointerResumesFromTheNewestCompleteCheckpoint) {
  const std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> damage = {
      {"missing", [](const fs::path& ck) { fs::remove(ck / "latest"); }},
      {"empty", [](const fs::path& ck) { io::write_file(ck / "latest", ""); }},
      {"garbage", [](const fs::path& ck) { io::write_file(ck / "latest", "\x01\xffnot a step\n"); }},
      {"dangling", [](const fs::path& ck) { io::write_file(ck / "latest", "step_00000090\n"); }},
  };
  for (const auto& [name, apply] : damage) {
    const fs::path dir = copy_of_stopped("pointer_" + name);
    apply(dir / "checkpoints");
    TrainSummary s = Trainer(config(dir, 30), {.resume = true, .quiet = true}).run();
    EXPECT_EQ(s.losses, full_from(20)) << name;
    EXPECT_EQ(read_metrics((dir / "metrics.jsonl").string()).size(), 30u) << name;
    EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step_00000030")) << name;
  }
}

TEST_F(ResumeSafety, ADamagedNewestCheckpointResumesFromTheOneBefore) {
  const fs::path dir = copy_of_stopped("damaged_newest");
  fs::remove(dir / "checkpoints" / "step_00000020" / "optimizer.safetensors");
  TrainSummary s = Trainer(config(dir, 30), {.resume = true, .quiet = true}).run();
  EXPECT_EQ(s.losses, full_from(10));
  EXPECT_EQ(read_metrics((dir / "metrics.jsonl").string()).size(), 30u);
}

TEST_F(ResumeSafety, NoCompleteCheckpointIsRefusedNotRestartedFromStepZero) {
  const fs::path dir = copy_of_stopped("none_complete");
  for (const char* step : {"step_00000010", "step_00000020"}) fs::remove(dir / "checkpoints" / step / "model.safetensors");
  const auto metrics_before = io::read_file(dir / "metrics.jsonl");
  const std::string err = refusal_of([&] { Trainer(config(dir, 30), {.resume = true, .quiet = true}); });
  EXPECT_NE(err.find("no complete checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("--overwrite"), std::string::npos) << err;
  EXPECT_EQ(io::read_file(dir / "metrics.jsonl"), metrics_before);
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step_00000020" / "state.json"));
}

TEST_F(ResumeSafety, AFreshRunIntoAnEarlierRunIsRefusedUnlessOverwrite) {
  const fs::path dir = copy_of_stopped("fresh");
  const std::string err = refusal_of([&] { Trainer(config(dir, 30), {.quiet = true}); });
  EXPECT_NE(err.find("--resume to continue, --overwrite to start over, or another train.out_dir"), std::string::npos)
      << err;
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step_00000020"));

  TrainSummary s = Trainer(config(dir, 30), {.overwrite = true, .quiet = true}).run();
  EXPECT_EQ(s.losses, full_);  // a new run from step 0
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step_00000010"));
  EXPECT_EQ(read_metrics((dir / "metrics.jsonl").string()).size(), 30u);
  EXPECT_TRUE(fs::exists(dir / "data" / "train.bin"));  // the data cache stays
}

TEST_F(ResumeSafety, ResumingAFinishedRunTrainsNothing) {
  const fs::path dir = copy_of_stopped("finished");
  const auto metrics_before = io::read_file(dir / "metrics.jsonl");
  TrainSummary s = Trainer(config(dir, 20), {.resume = true, .quiet = true}).run();
  EXPECT_TRUE(s.already_finished);
  EXPECT_NE(s.message.find("already finished at step 20; raise train.steps to continue"), std::string::npos) << s.message;
  EXPECT_TRUE(s.losses.empty());
  EXPECT_EQ(io::read_file(dir / "metrics.jsonl"), metrics_before);
}

TEST_F(ResumeSafety, ASecondTrainerOnTheSameFolderIsRefusedNamingThePid) {
  const fs::path dir = copy_of_stopped("locked");
  Trainer first(config(dir, 30), {.resume = true, .quiet = true});
  const std::string err = refusal_of([&] { Trainer(config(dir, 30), {.resume = true, .quiet = true}); });
  EXPECT_NE(err.find("in use by another trainer (pid " + std::to_string(::getpid()) + ","), std::string::npos) << err;
  EXPECT_EQ(first.run().losses, full_from(20));  // the first is undisturbed
}

TEST_F(ResumeSafety, AFullDiskStopsTheRunNamingTheFileAndKeepsTheCheckpoint) {
  const fs::path dir = copy_of_stopped("full_disk");
  fs::remove(dir / "metrics.jsonl");
  fs::create_symlink("/dev/full", dir / "metrics.jsonl");
  std::string err;
  try {
    Trainer(config(dir, 30), {.resume = true, .quiet = true}).run();
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("metrics.jsonl"), std::string::npos) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_EQ(checkpoint_problem(dir / "checkpoints" / "step_00000020"), std::nullopt);
  EXPECT_EQ(find_resume_checkpoint(dir / "checkpoints").dir, dir / "checkpoints" / "step_00000020");
}
