// --no-memory-check of `trireme generate` and `trireme eval`: without it a checkpoint whose model
// cannot fit is refused (exit 2) with the estimate and the flag that skips the check; with it the
// model is built anyway. The model here needs terabytes, so the command runs under a small
// address-space limit (ulimit -v): building it then fails at its first large allocation on any
// machine, which shows the check was skipped without touching that much memory.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"
#include "trireme/io/config.h"
#include "trireme/io/tokenizer.h"
#include "trireme/train/checkpoint.h"

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
#define TRIREME_SKIP_UNDER_ASAN() GTEST_SKIP() << "ulimit -v cannot coexist with AddressSanitizer's shadow memory"
#else
#define TRIREME_SKIP_UNDER_ASAN() (void)0
#endif

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;
using trireme::cli_testing::run_command;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

// A checkpoint of a model of width 2^20 (about 13e12 parameters) with no weights saved: loading
// it gets as far as the memory check, or, skipped, as building the model.
class MemoryCheckFlag : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() / ("memory_check_flag" + std::to_string(::getpid()))).string());
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string toml =
        trireme::io::Config::parse("", "test",
                                   {"model.d_model=1048576", "model.n_head=1", "model.n_layer=1", "model.block_size=8"})
            .to_toml();
    trireme::train::Checkpoint ck;
    ck.step = 1;
    ck.state = {{"config", toml}, {"tokenizer", trireme::io::train_tokenizer("char", "ab")->to_json()}};
    trireme::train::save_checkpoint(fs::path(*dir_) / "checkpoints", ck);
    std::ofstream(*dir_ + "/text.txt") << "abba";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  // `trireme ARGS` with its address space limited to 64 GiB.
  // An address-space limit makes the allocation fail in the process; AddressSanitizer reserves
  // terabytes of shadow memory at start-up, which the same limit forbids, so an ASan build skips.
  static Result run_limited(const std::string& args) {
    return run_command("ulimit -v 67108864 && " + std::string(TRIREME_BINARY) + " " + args);
  }
  static std::string* dir_;
};
std::string* MemoryCheckFlag::dir_ = nullptr;

TEST_F(MemoryCheckFlag, GenerateRefusesAModelTooLargeAndNamesTheFlag) {
  const Result r = run("generate --checkpoint " + *dir_ + " --prompt a -n 1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_CONTAINS(r.out, "memory: the checkpoint's model needs about");
  EXPECT_CONTAINS(r.out, "(--no-memory-check skips this check)");
}

TEST_F(MemoryCheckFlag, GenerateWithTheFlagBuildsTheModelAnyway) {
  TRIREME_SKIP_UNDER_ASAN();
  const Result r = run_limited("generate --checkpoint " + *dir_ + " --prompt a -n 1 --no-memory-check");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.find("memory: the checkpoint's model"), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "out of CPU memory");
}

TEST_F(MemoryCheckFlag, EvalRefusesAModelTooLargeAndNamesTheFlag) {
  const Result r = run("eval --checkpoint " + *dir_ + " --text " + *dir_ + "/text.txt");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_CONTAINS(r.out, "memory: the checkpoint's model needs about");
  EXPECT_CONTAINS(r.out, "(--no-memory-check skips this check)");
}

TEST_F(MemoryCheckFlag, EvalWithTheFlagBuildsTheModelAnyway) {
  TRIREME_SKIP_UNDER_ASAN();
  const Result r = run_limited("eval --checkpoint " + *dir_ + " --text " + *dir_ + "/text.txt --no-memory-check");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.find("memory: the checkpoint's model"), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "out of CPU memory");
}

// train's --force: the same model refused by train's check, built anyway with the flag.
TEST_F(MemoryCheckFlag, TrainWithForceBuildsTheModelAnyway) {
  TRIREME_SKIP_UNDER_ASAN();
  // A two-letter corpus: the embedding is small, and the first block's weights are what fails.
  {
    std::ofstream text(*dir_ + "/ab.txt");
    for (int line = 0; line < 400; ++line) text << (line % 3 ? "abbaab" : "baabba") << "abab\n";
  }
  const std::string sizes = " --set model.d_model=1048576 --set model.n_head=1 --set model.n_layer=1 "
                            "--set model.block_size=8 --set data.corpus=" + *dir_ + "/ab.txt "
                            "--set train.out_dir=" + *dir_ + "/train";
  const Result refused = run("train" + sizes);
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_CONTAINS(refused.out, "--force, or --set train.memory_check=false, skips this check");
  const Result forced = run_limited("train --force" + sizes);
  EXPECT_EQ(forced.status, 1) << forced.out;
  EXPECT_EQ(forced.out.find("memory: training needs"), std::string::npos) << forced.out;
  EXPECT_CONTAINS(forced.out, "out of CPU memory");
}

TEST_F(MemoryCheckFlag, HelpListsTheFlag) {
  EXPECT_CONTAINS(run("train --help").out, "--force");
  EXPECT_CONTAINS(run("generate --help").out, "--no-memory-check");
  EXPECT_CONTAINS(run("eval --help").out, "--no-memory-check");
}

}  // namespace
