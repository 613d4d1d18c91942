// Activation recomputation changes no value: `trireme train` with memory.recompute = "full" or
// "selective" logs the losses, gradient norms and validation losses of the same run without it, dropout on,
// within 1e-6 relative over every step, in one process and in each parallel layout (dp, tp with
// sequence parallelism, pipelines under 1F1B and the interleaved schedule, ZeRO-1, bf16 autocast
// in one process and in a pipeline, recomputing only some blocks).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "parallel_cli.h"

namespace fs = std::filesystem;
using namespace trireme::parallel::testing;

namespace {

class Recompute : public ::testing::TestWithParam<std::pair<const char*, const char*>> {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_recompute_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::vector<Step> train(const std::string& name, const std::string& extra) {
    const fs::path dir = root_ / name;
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() +
                       " --set train.steps=8 --set model.dropout=0.1 " + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    for (const char* mode : {"full", "selective"}) {
      const bool recomputes = extra.find(std::string("memory.recompute=") + mode) != std::string::npos;
      EXPECT_EQ(r.output.find(std::string(", recompute ") + mode) != std::string::npos, recomputes) << r.output;
    }
    return read_metrics(dir);
  }
  static void expect_same_run(const std::vector<Step>& again, const std::vector<Step>& plain, const std::string& name) {
    ASSERT_EQ(plain.size(), 8u);
    ASSERT_EQ(again.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_LE(std::abs(again[i].loss - plain[i].loss), 1e-6 * plain[i].loss) << name << " step " << i + 1;
      EXPECT_LE(std::abs(again[i].grad_norm - plain[i].grad_norm), 1e-6 * plain[i].grad_norm) << name << " step " << i + 1;
      EXPECT_EQ(std::isnan(again[i].val_loss), std::isnan(plain[i].val_loss));
      if (!std::isnan(plain[i].val_loss)) EXPECT_LE(std::abs(again[i].val_loss - plain[i].val_loss), 1e-6 * plain[i].val_loss);
    }
  }
  static fs::path root_;
};
fs::path Recompute::root_;

TEST_P(Recompute, FullAndSelectiveRecomputationLogTheSameRun) {
  const auto [name, layout] = GetParam();
  const std::vector<Step> plain = train(std::string(name) + "_none", layout);
  expect_same_run(train(std::string(name) + "_full", std::string(layout) + " --set memory.recompute=full"), plain,
                  std::string(name) + " full");
  expect_same_run(train(std::string(name) + "_selective", std::string(layout) + " --set memory.recompute=selective"),
                  plain, std::string(name) + " selective");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Recompute,
    ::testing::Values(std::pair{"one_process", ""}, std::pair{"one_process_bf16", "--set train.precision=bf16"},
                      std::pair{"one_process_first_2", "--set memory.recompute_layers=2"},
                      std::pair{"dp2_zero", "--nproc 2 --set parallel.dp=2 --set parallel.zero=true"},
                      std::pair{"tp2", "--nproc 2 --set parallel.tp=2"},
                      std::pair{"dp2_zero3", "--nproc 2 --set parallel.zero=3"},
                      std::pair{"tp2_sp", "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true"},
                      std::pair{"pp2_1f1b", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4"},
                      std::pair{"pp2_1f1b_bf16", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 "
                                                 "--set train.precision=bf16"},
                      std::pair{"pp2_interleaved", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 "
                                                   "--set parallel.schedule=interleaved --set parallel.virtual_stages=2"}),
    [](const auto& info) { return std::string(info.param.first); });

}  // namespace
