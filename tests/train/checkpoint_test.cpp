// Checkpoints: round trip, atomicity under a process killed mid-save, validation errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "trireme/ops/elementwise.h"
#include "trireme/train/checkpoint.h"

using namespace trireme;
using namespace trireme::train;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("trireme_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Small tensors (under the OpenMP grain) so a forked child never starts a thread team.
Checkpoint make_checkpoint(int64_t step, int tensors = 4) {
  Checkpoint c;
  c.step = step;
  for (int i = 0; i < tensors; ++i) {
    c.model.emplace_back("w" + std::to_string(i), full({100, 300}, double(step)));
  }
  c.optimizer.emplace_back("m", full({10}, double(step) * 2));
  c.state = {{"rng_offset", step * 10}};
  return c;
}

}  // namespace

TEST(Checkpoint, RoundTripAndLatestPointer) {
  fs::path root = fresh_dir("roundtrip");
  save_checkpoint(root, make_checkpoint(1));
  save_checkpoint(root, make_checkpoint(2));
  auto latest = find_latest_checkpoint(root);
  ASSERT_TRUE(latest.has_value());
  Checkpoint c = load_checkpoint(*latest);
  EXPECT_EQ(c.step, 2);
  EXPECT_EQ(c.model.size(), 4u);
  EXPECT_EQ(c.model[0].first, "w0");
  EXPECT_EQ(c.model[0].second.at({5, 7}), 2.0);
  EXPECT_EQ(c.optimizer[0].second.at({3}), 4.0);
  EXPECT_EQ(c.state["rng_offset"], 20);
  fs::remove_all(root);
}

TEST(Checkpoint, KeepsOnlyTheNewest) {
  fs::path root = fresh_dir("keep");
  for (int s = 1; s <= 4; ++s) save_checkpoint(root, make_checkpoint(s), 2);
  int dirs = 0;
  for (auto& e : fs::directory_iterator(root)) dirs += e.is_directory();
  EXPECT_EQ(dirs, 2);
  EXPECT_EQ(load_checkpoint(*find_latest_checkpoint(root)).step, 4);
  fs::remove_all(root);
}

TEST(Checkpoint, ProcessDyingInTheMiddleOfASaveLeavesThePreviousOneLoadable) {
  fs::path root = fresh_dir("die");
  save_checkpoint(root, make_checkpoint(1));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    set_save_checkpoint_test_hook([] { std::_Exit(137); });
    save_checkpoint(root, make_checkpoint(2));
    std::_Exit(0);  // not reached: the hook exits with 137 after the model file
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 137);
  Checkpoint c = load_checkpoint(*find_latest_checkpoint(root));
  EXPECT_EQ(c.step, 1);
  EXPECT_EQ(c.model[3].second.at({99, 299}), 1.0);
  // The next save cleans the leftover temporary folder.
  save_checkpoint(root, make_checkpoint(3));
  for (auto& e : fs::directory_iterator(root)) EXPECT_NE(e.path().filename().string().rfind(".step_", 0), 0u);
  fs::remove_all(root);
}

TEST(Checkpoint, KilledAtRandomMomentsTheLatestAlwaysLoads) {
  fs::path root = fresh_dir("sigkill");
  save_checkpoint(root, make_checkpoint(1));
  for (int trial = 0; trial < 5; ++trial) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t s = 2;; ++s) save_checkpoint(root, make_checkpoint(s, 12));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 17 * trial));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    auto latest = find_latest_checkpoint(root);
    ASSERT_TRUE(latest.has_value());
    Checkpoint c = load_checkpoint(*latest);  // throws if torn
    EXPECT_EQ(c.model[0].second.at({0, 0}), double(c.step));
  }
  fs::remove_all(root);
}

TEST(Checkpoint, ErrorsNameTheProblem) {
  fs::path root = fresh_dir("errors");
  fs::path dir = save_checkpoint(root, make_checkpoint(5));
  fs::remove(dir / "optimizer.safetensors");
  try {
    load_checkpoint(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors is missing"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_checkpoint(root / "nope"), Error);
  fs::remove_all(root);
}
