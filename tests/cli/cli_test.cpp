// The trireme command line as a user meets it: help everywhere, one clear line for a bad flag or
// a missing file, exit status 2 for configuration errors that name the key.
#include <gtest/gtest.h>

#include "run_command.h"
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "trireme/cuda/device.h"

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string temp_file(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST(Cli, VersionAndHelpOnEverySubcommand) {
  Result v = run("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_NE(v.out.find("trireme "), std::string::npos);
  for (const char* sub : {"train", "generate", "prepare", "launch", "plot", "env"}) {
    Result h = run(std::string(sub) + " --help");
    EXPECT_EQ(h.status, 0) << sub << ": " << h.out;
    EXPECT_NE(h.out.find("sage"), std::string::npos) << sub << ": " << h.out;  // "Usage" / "usage"
  }
  EXPECT_NE(run("train --help").out.find("optim.lr"), std::string::npos);  // config keys are listed
}

TEST(Cli, BadFlagsAndMissingFilesAreOneLine) {
  Result r = run("train --no-such-flag");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  r = run("train --config /nonexistent/train.toml");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/train.toml"), std::string::npos);
  r = run("generate --checkpoint /nonexistent --prompt x");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  r = run("plot /nonexistent/metrics.jsonl");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(lines(r.out), 1) << r.out;
  r = run("no-such-command");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.out), 1) << r.out;
}

TEST(Cli, ConfigErrorsNameTheKeyAndExit2) {
  std::string unknown = temp_file("unknown.toml", "[optim]\nlrr = 0.1\n");
  Result r = run("train --config " + unknown);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("optim.lrr"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optim.lr"), std::string::npos) << r.out;

  r = run("train --set optim.lr=-1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("optim.lr"), std::string::npos) << r.out;

  std::string wrong_type = temp_file("type.toml", "[model]\nn_layer = \"four\"\n");
  r = run("train --config " + wrong_type);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("model.n_layer"), std::string::npos) << r.out;

  std::string bad_toml = temp_file("bad.toml", "[model\n");
  r = run("train --config " + bad_toml);
  EXPECT_EQ(r.status, 2) << r.out;
  std::filesystem::remove(unknown);
  std::filesystem::remove(wrong_type);
  std::filesystem::remove(bad_toml);
}

// train.device = "cuda" (and generate --device cuda) where no GPU can be used: the reason
// (no CUDA in the build, or the CUDA runtime's own error) in one message, before any work.
TEST(Cli, CudaWithoutAGpuSaysWhy) {
  if (trireme::cuda::is_available()) GTEST_SKIP() << "a GPU is usable here";
  const std::string out_dir = (std::filesystem::temp_directory_path() / ("cli_cuda" + std::to_string(::getpid()))).string();
  Result r = run("train --set train.device=cuda --set train.out_dir=" + out_dir);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("train.device = \"cuda\", but no GPU can be used: " + trireme::cuda::unavailable_reason()),
            std::string::npos) << r.out;
  EXPECT_LE(lines(r.out), 2) << r.out;  // "trireme train: config error:" and the reason
  EXPECT_FALSE(std::filesystem::exists(out_dir));

  r = run("generate --checkpoint " + std::filesystem::temp_directory_path().string() + " --prompt x --device cuda");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find(trireme::cuda::unavailable_reason()), std::string::npos) << r.out;
  r = run("generate --checkpoint " + std::filesystem::temp_directory_path().string() + " --prompt x --device tpu");
  EXPECT_EQ(r.status, 2) << r.out;
}

TEST(Cli, EnvReportsTheBuild) {
  Result r = run("env --json");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("\"openblas\""), std::string::npos) << r.out;
}
