// The users' size reports through the binary: every one is a config error (exit 2) naming the
// key, or a clean run, never a signal and never a run that allocates until the OOM killer.
#include <gtest/gtest.h>

#include "run_command.h"
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "trireme/io/config.h"
#include "trireme/train/checkpoint.h"

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

std::string fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

// `trireme train` with these overrides in a fresh out_dir: exit 2, `key` named, nothing written.
void expect_refused(const std::string& sets, const std::string& key) {
  const std::string out_dir = fresh_dir("cli_sizes");
  Result r = run("train --set train.out_dir=" + out_dir + " " + sets);
  EXPECT_EQ(r.status, 2) << sets << ": " << r.out;
  EXPECT_NE(r.out.find(key), std::string::npos) << sets << ": " << r.out;
  EXPECT_FALSE(std::filesystem::exists(out_dir)) << sets;
}

}  // namespace

TEST(CliSizes, OutOfRangeSizesAreConfigErrorsNamingTheKey) {
  expect_refused("--set train.batch_size=1152921504606846976", "train.batch_size: expected an integer in [1, 16777216]");
  expect_refused("--set model.d_model=1623261534117349 --set model.n_head=1", "model.d_model: expected an integer in");
  expect_refused("--set model.block_size=9223372036854775807", "model.block_size: expected an integer in");
  expect_refused("--set model.n_layer=1000000", "model.n_layer: expected an integer in [1, 65536]");
}

TEST(CliSizes, AModelLargerThanMemoryIsRefusedWithTheEstimate) {
  expect_refused("--set model.d_model=4096 --set model.n_layer=65536", "memory: training needs about");
  expect_refused("--set model.d_model=4096 --set model.n_layer=65536", "lower model.n_layer or model.d_model");
}

TEST(CliSizes, WarmupAsLongAsTheRunTrains) {
  const std::string out_dir = fresh_dir("cli_warmup_all");
  Result r = run("train --set train.out_dir=" + out_dir +
                 " --set train.steps=2 --set schedule.warmup_steps=2 --set model.d_model=16 --set model.n_layer=1"
                 " --set model.n_head=2 --set model.block_size=8 --set train.batch_size=2 --set train.eval_batches=1"
                 " --set train.threads=1");
  EXPECT_EQ(r.status, 0) << r.out;
  std::filesystem::remove_all(out_dir);
}

TEST(CliSizes, GenerateRefusesACheckpointWithAnOutOfRangeConfig) {
  const std::string dir = fresh_dir("cli_huge_ckpt");
  std::string toml = std::regex_replace(trireme::io::Config().to_toml(), std::regex("d_model = 256"),
                                        "d_model = 1623261534117349");
  toml = std::regex_replace(toml, std::regex("n_head = 4"), "n_head = 1");
  trireme::train::Checkpoint ck;
  ck.step = 1;
  ck.state = {{"config", toml}, {"tokenizer", {{"type", "char"}}}};
  trireme::train::save_checkpoint(std::filesystem::path(dir) / "checkpoints", ck);
  Result r = run("generate --checkpoint " + dir + " --prompt x");
  EXPECT_EQ(r.status, 2) << r.out;  // a configuration error: exit 2, as train gives
  EXPECT_NE(r.out.find("model.d_model: expected an integer in [1, 1048576], got 1623261534117349"), std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}
