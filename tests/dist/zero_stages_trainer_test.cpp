// ZeRO stages 2 and 3 through `trireme train`: every layout logs the losses, gradient norms and
// validation losses of one process within 1e-4 relative over 20 steps (dp 2 and 4, with tensor
// and sequence parallelism, micro-batches, a pipeline under ZeRO-2, recomputation with dropout,
// bf16 autocast, against dp2 without ZeRO); a run resumes across stages; and each stage holds
// less than the one before.
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

struct Case {
  const char* name;
  const char* layout;  // the run under test
  const char* both;    // also given to the run it is compared with
  // That run's layout: one process, except under bf16, whose rounding depends on how the batch
  // is split, so dp2 without ZeRO.
  const char* reference = "";
};

class ZeroStages : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_zero_stages_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::vector<Step> train(const std::string& name, const std::string& extra, const std::string& expect_in_log = "") {
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() +
                       " --set train.steps=20 --set train.eval_interval=5 " + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    if (!expect_in_log.empty()) {
      EXPECT_NE(r.output.find(expect_in_log), std::string::npos) << r.output;
    }
    return read_metrics(dir);
  }
  static void expect_same_run(const std::vector<Step>& got, const std::vector<Step>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE(std::abs(got[i].loss - want[i].loss), 1e-4 * want[i].loss) << what << " step " << i + 1;
      EXPECT_LE(std::abs(got[i].grad_norm - want[i].grad_norm), 1e-4 * want[i].grad_norm) << what << " step " << i + 1;
      EXPECT_EQ(std::isnan(got[i].val_loss), std::isnan(want[i].val_loss)) << what << " step " << i + 1;
      if (!std::isnan(want[i].val_loss)) {
        EXPECT_LE(std::abs(got[i].val_loss - want[i].val_loss), 1e-4 * want[i].val_loss);
      }
    }
  }
  static fs::path root_;
};
fs::path ZeroStages::root_;

TEST_P(ZeroStages, LogTheRunOfOneProcess) {
  const Case c = GetParam();
  const std::vector<Step> one = train(std::string(c.name) + "_reference", std::string(c.reference) + " " + c.both);
  const std::string stage = std::string(c.layout).find("zero=3") != std::string::npos ? "ZeRO-3" : "ZeRO-2";
  const std::vector<Step> split = train(c.name, std::string(c.layout) + " " + c.both, stage);
  ASSERT_EQ(one.size(), 20u);
  expect_same_run(split, one, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ZeroStages,
    ::testing::Values(
        Case{"dp2_zero2", "--nproc 2 --set parallel.zero=2 --set parallel.bucket_mb=0.02", ""},
        Case{"dp2_zero3", "--nproc 2 --set parallel.zero=3", ""},
        Case{"dp4_zero2", "--nproc 4 --set parallel.zero=2 --set parallel.bucket_mb=0.02", ""},
        Case{"dp4_zero3", "--nproc 4 --set parallel.zero=3", ""},
        Case{"dp2_tp2_sp_zero3", "--nproc 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true "
                                 "--set parallel.zero=3", ""},
        Case{"dp2_micro_batches_zero3", "--nproc 2 --set parallel.zero=3", "--set parallel.micro_batches=2"},
        Case{"dp2_pp2_zero2", "--nproc 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.zero=2",
             "--set parallel.micro_batches=2"},
        Case{"dp2_recompute_dropout_zero3", "--nproc 2 --set parallel.zero=3",
             "--set memory.recompute=full --set model.dropout=0.1"},
        Case{"dp2_bf16_zero3", "--nproc 2 --set parallel.zero=3", "--set train.precision=bf16", "--nproc 2"}),
    [](const auto& info) { return std::string(info.param.name); });

// Checkpoints hold whole tensors whatever the stage: 10 steps under ZeRO-1, resumed under
// ZeRO-3 (and the reverse), log the second half of a run that kept one stage throughout.
TEST_F(ZeroStages, ResumeAcrossStages) {
  for (const auto& [first, second] : {std::pair{"1", "3"}, std::pair{"3", "2"}}) {
    const std::string name = std::string("resume_") + first + "_" + second;
    const std::string dp2 = " --nproc 2 --set train.checkpoint_interval=10 --set parallel.zero=";
    const std::vector<Step> straight = train(name + "_straight", dp2 + first);
    const fs::path dir = root_ / name;
    fs::remove_all(dir);
    const std::string base = "train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() +
                             " --set train.eval_interval=5" + dp2;
    Result a = run_cli(base + first + " --set train.steps=10");
    ASSERT_EQ(a.status, 0) << a.output;
    Result b = run_cli(base + second + " --set train.steps=20 --resume");
    ASSERT_EQ(b.status, 0) << b.output;
    const std::vector<Step> resumed = read_metrics(dir);
    expect_same_run(resumed, straight, name);
  }
}

// Peak memory of rank 0 (live tensor bytes) falls with each stage on a model whose blocks
// outweigh its embeddings (dp 4, d_model 256, 8 blocks).
TEST_F(ZeroStages, EachStageHoldsLess) {
  std::vector<double> peaks;
  for (int stage = 1; stage <= 3; ++stage) {
    const fs::path dir = root_ / ("peak_" + std::to_string(stage));
    fs::remove_all(dir);
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() +
                       " --nproc 4 --set train.steps=2 --set model.d_model=256 --set model.n_layer=8 "
                       "--set parallel.bucket_mb=0.5 --set parallel.zero=" + std::to_string(stage));
    ASSERT_EQ(r.status, 0) << r.output;
    double peak = 0;
    std::ifstream f(dir / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
      peak = std::max(peak, nlohmann::json::parse(line)["peak_memory_bytes"].get<double>());
    }
    peaks.push_back(peak);
  }
  EXPECT_LT(peaks[1], 0.9 * peaks[0]) << "ZeRO-2 against ZeRO-1";
  EXPECT_LT(peaks[2], 0.97 * peaks[1]) << "ZeRO-3 against ZeRO-2";
}

}  // namespace
