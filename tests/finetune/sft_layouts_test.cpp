// Supervised fine-tuning in every supported layout gives the single process's losses: each
// micro-batch's mean over its response tokens is weighted by its share of the global batch's
// response tokens, so two micro-batches (one process), dp = 2 and tp = 2 log the one-process
// per-step training and validation losses and gradient norms (1e-4 relative), with examples
// whose response lengths differ (unequal counts per micro-batch); so does a two-stage pipeline
// of two micro-batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dist/parallel_cli.h"
#include "tiny_trainer_config.h"

namespace fs = std::filesystem;
using namespace trireme::parallel::testing;

namespace {

class SftLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_sft_layouts_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
    trireme::testing::write_verse_sft_pairs((root_ / "sft.jsonl").string());
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.steps=4 --set train.out_dir=" +
                       (root_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
    r = sft("single", "");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static Result sft(const std::string& name, const std::string& extra) {
    return run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + (root_ / name).string() +
                   " --init-from " + (root_ / "base").string() + " --set finetune.task=sft --set finetune.train_file=" +
                   (root_ / "sft.jsonl").string() + " --set finetune.template={prompt}{response} " + extra);
  }

  static void expect_same(const std::string& name, const std::string& extra) {
    Result r = sft(name, extra);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto a = read_metrics(root_ / "single"), b = read_metrics(root_ / name);
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i].loss, a[i].loss, 1e-4 * std::abs(a[i].loss)) << name << " step " << i + 1;
      EXPECT_NEAR(b[i].grad_norm, a[i].grad_norm, 1e-4 * std::abs(a[i].grad_norm)) << name << " step " << i + 1;
      if (!std::isnan(a[i].val_loss)) {
        EXPECT_NEAR(b[i].val_loss, a[i].val_loss, 1e-4 * std::abs(a[i].val_loss)) << name << " step " << i + 1;
      }
    }
  }

  static fs::path root_;
};

fs::path SftLayouts::root_;

}  // namespace

TEST_F(SftLayouts, MicroBatchesMatchOneProcess) { expect_same("mb2", "--set parallel.micro_batches=2"); }

TEST_F(SftLayouts, DataParallelMatchesOneProcess) { expect_same("dp2", "--nproc 2"); }

TEST_F(SftLayouts, TensorParallelMatchesOneProcess) { expect_same("tp2", "--nproc 2 --set parallel.tp=2"); }

TEST_F(SftLayouts, PipelineMatchesOneProcess) {
  expect_same("pp2", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
}
