// `trireme train --nproc N` end to end: a tiny GPT on the Tang poems trained in each parallel
// layout logs the single process's per-step losses, gradient norms and validation losses
// (1e-4 relative, docs/PARALLELISM.md), tp x pp and dp x pp with ZeRO-1 included, and with dropout
// 0.1 per step too (Note [dropout keyed by global sample]); config errors exit with status 2 and say
// what to change; a parallel checkpoint (pp, tp x pp) is whole single-process tensors that
// `trireme generate` loads; a parallel run resumes bit-identically in its own layout (in another:
// parallel_relayout_test.cpp).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trireme/io/safetensors.h"
#include "trireme/ops/copy.h"
#include "trireme/train/checkpoint.h"
#include "parallel_cli.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

class ParallelTrainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_ptrain_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
    // The data are prepared once and copied into each run's folder, so no run tokenizes again.
    Result r = train("single", "");
    ASSERT_EQ(r.status, 0) << r.output;
    single_ = new std::vector<Step>(read_metrics(root_ / "single"));
    ASSERT_EQ(single_->size(), 12u);
  }
  static void TearDownTestSuite() {
    delete single_;
    single_ = nullptr;
    delete single_dropout_;
    single_dropout_ = nullptr;
    fs::remove_all(root_);
  }

  static Result train(const std::string& name, const std::string& extra) {
    const fs::path dir = root_ / name;
    if (name != "single" && !fs::exists(dir / "data") && fs::exists(root_ / "single" / "data")) {
      fs::create_directories(dir);
      fs::copy(root_ / "single" / "data", dir / "data", fs::copy_options::recursive);
    }
    return run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() + " " + extra);
  }

  // The single process with dropout 0.1 (made on first use).
  static const std::vector<Step>& single_dropout() {
    if (!single_dropout_) {
      Result r = train("single_dropout", kDropout);
      EXPECT_EQ(r.status, 0) << r.output;
      single_dropout_ = new std::vector<Step>(read_metrics(root_ / "single_dropout"));
    }
    return *single_dropout_;
  }

  // Trains `name` with `extra` flags and compares every step with the single process (the one
  // trained with dropout 0.1 when `dropout`, Note [gradient norm with dropout]).
  static void expect_matches_single(const std::string& name, const std::string& extra, bool dropout = false) {
    const double norm_tolerance = dropout ? 1e-2 : 1e-4;
    const std::vector<Step>& ref = dropout ? single_dropout() : *single_;
    Result r = train(name, dropout ? extra + " " + kDropout : extra);
    ASSERT_EQ(r.status, 0) << r.output;
    std::vector<Step> got = read_metrics(root_ / name);
    ASSERT_EQ(got.size(), ref.size()) << r.output;
    double worst = 0, worst_norm = 0, worst_val = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const Step &a = ref[i], &b = got[i];
      worst = std::max(worst, std::abs(a.loss - b.loss) / a.loss);
      worst_norm = std::max(worst_norm, std::abs(a.grad_norm - b.grad_norm) / a.grad_norm);
      EXPECT_EQ(std::isnan(a.val_loss), std::isnan(b.val_loss)) << "step " << i + 1;
      if (!std::isnan(a.val_loss)) worst_val = std::max(worst_val, std::abs(a.val_loss - b.val_loss) / a.val_loss);
      EXPECT_LT(std::abs(a.loss - b.loss), 1e-4 * a.loss) << name << " step " << i + 1 << ": " << b.loss << " vs " << a.loss;
    }
    EXPECT_LT(worst_norm, norm_tolerance) << name;
    EXPECT_LT(worst_val, 1e-4) << name;
    EXPECT_NE(r.output.find("layout: "), std::string::npos) << r.output;
    std::printf("[ %s ] losses %.4f -> %.4f; worst relative diff: loss %.1e, grad norm %.1e, val loss %.1e\n",
                name.c_str(), got.front().loss, got.back().loss, worst, worst_norm, worst_val);
  }

  static constexpr const char* kDropout = "--set model.dropout=0.1";
  static fs::path root_;
  static std::vector<Step>* single_;
  static std::vector<Step>* single_dropout_;
};

fs::path ParallelTrainer::root_;
std::vector<Step>* ParallelTrainer::single_ = nullptr;
std::vector<Step>* ParallelTrainer::single_dropout_ = nullptr;

}  // namespace

TEST_F(ParallelTrainer, DataParallelMatchesOneProcess) {
  expect_matches_single("dp2", "--nproc 2 --set parallel.dp=2");
}
TEST_F(ParallelTrainer, TensorParallelMatchesOneProcess) {
  expect_matches_single("tp2", "--nproc 2 --set parallel.tp=2");
}
// Note [sequence parallelism]: the same training, activations sharded by tokens.
TEST_F(ParallelTrainer, SequenceParallelMatchesOneProcess) {
  expect_matches_single("tp2_sp", "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true");
}

TEST_F(ParallelTrainer, PipelineMatchesOneProcess) {
  expect_matches_single("pp2", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 --set parallel.schedule=1f1b");
}
TEST_F(ParallelTrainer, ZeroMatchesOneProcess) {
  expect_matches_single("dp2_zero", "--nproc 2 --set parallel.dp=2 --set parallel.zero=true --set parallel.bucket_mb=0.05");
}
TEST_F(ParallelTrainer, FourReplicasMatchOneProcess) {
  expect_matches_single("dp4", "--nproc 4 --set parallel.dp=4");
}
TEST_F(ParallelTrainer, AccumulationAndCombinedLayoutsMatchOneProcess) {
  expect_matches_single("dp2_mb2", "--nproc 2 --set parallel.dp=2 --set parallel.micro_batches=2");
  expect_matches_single("dp2_pp2", "--nproc 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2");
  expect_matches_single("pp2_interleaved", "--nproc 2 --set parallel.pp=2 --set parallel.schedule=interleaved "
                                           "--set parallel.virtual_stages=2 --set parallel.micro_batches=2");
}

TEST_F(ParallelTrainer, TensorParallelInsidePipelineMatchesOneProcess) {
  expect_matches_single("tp2_pp2", "--nproc 4 --set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batches=2");
}

// Note [dropout keyed by global sample]: with dropout each sample draws the single process's
// masks in every layout, so the per-step losses are equal, not just equal in distribution.
//
// Note [gradient norm with dropout]
// Losses and validation losses are held to the usual 1e-4 (measured: at most 6e-7), but the
// gradient norm only to 1e-2: on this config's dropout 0.1 trajectory step 11's norm (2.2, a
// spike; the others are near 1) is ill-conditioned, moving by 8e-4 between two single-process
// runs that differ only in train.threads (1 vs 2), so no layout can match it to 1e-4. Steps 1-7
// agree to 3e-8 there.
TEST_F(ParallelTrainer, DropoutRunsMatchOneProcessPerStep) {
  // The check can fail: dropout 0.1 moves the losses by more than the tolerance (measured: up
  // to 8.6e-4 relative), so a layout drawing other masks than the single process fails it.
  const std::vector<Step>& with = single_dropout();
  ASSERT_EQ(with.size(), single_->size());
  double moved = 0;
  for (size_t i = 0; i < with.size(); ++i)
    moved = std::max(moved, std::abs(with[i].loss - (*single_)[i].loss) / (*single_)[i].loss);
  EXPECT_GT(moved, 3e-4);
  expect_matches_single("dp2_dropout", "--nproc 2 --set parallel.dp=2", true);
  expect_matches_single("tp2_dropout", "--nproc 2 --set parallel.tp=2", true);
  expect_matches_single("tp2_sp_dropout", "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true", true);
  expect_matches_single("pp2_gpipe_dropout",
                        "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 --set parallel.schedule=gpipe", true);
  expect_matches_single("pp2_1f1b_dropout",
                        "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 --set parallel.schedule=1f1b", true);
  expect_matches_single("dp2_pp2_dropout", "--nproc 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2",
                        true);
}

// Note [ZeRO inside a pipeline]: each stage's optimizer state sharded over its dp group.
TEST_F(ParallelTrainer, ZeroInsidePipelineMatchesOneProcessAndResumes) {
  const std::string layout =
      "--nproc 4 --set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batches=2 --set parallel.zero=true "
      "--set parallel.bucket_mb=0.05";
  expect_matches_single("dp2_pp2_zero", layout);
  // Checkpoints: one optimizer shard per rank; a resumed run continues bit-identically.
  auto dir = train::find_latest_checkpoint(root_ / "dp2_pp2_zero" / "checkpoints");
  ASSERT_TRUE(dir);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(fs::exists(*dir / ("optimizer.rank" + std::to_string(rank) + ".safetensors"))) << rank;
  Result first = train("dp2_pp2_zero_resume", layout + " --set train.steps=6");
  ASSERT_EQ(first.status, 0) << first.output;
  Result rest = train("dp2_pp2_zero_resume", layout + " --resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  EXPECT_NE(rest.output.find("resume: from"), std::string::npos) << rest.output;
  std::vector<Step> a = read_metrics(root_ / "dp2_pp2_zero"), b = read_metrics(root_ / "dp2_pp2_zero_resume");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss) << "step " << i + 1;
}

TEST_F(ParallelTrainer, ConfigErrorsSayWhatToChange) {
  Result heads = train("err", "--nproc 2 --set parallel.tp=3");
  EXPECT_EQ(heads.status, 2) << heads.output;
  EXPECT_NE(heads.output.find("parallel.tp: expected a divisor of model.n_head = 4"), std::string::npos) << heads.output;

  Result nproc = train("err", "--nproc 4 --set parallel.dp=2");
  EXPECT_EQ(nproc.status, 2) << nproc.output;
  EXPECT_NE(nproc.output.find("needs dp x tp x pp = 2 processes; use --nproc 2"), std::string::npos) << nproc.output;

  // Started by the launcher directly: every rank finds WORLD_SIZE 2 against a layout of 1.
  Result world = run_cli("launch --nproc-per-node 2 -- " + std::string(TRIREME_BINARY) + " train -c " +
                      (root_ / "tiny.toml").string() + " --set train.out_dir=" + (root_ / "err").string());
  EXPECT_EQ(world.status, 2) << world.output;
  EXPECT_NE(world.output.find("but WORLD_SIZE is 2"), std::string::npos) << world.output;
  EXPECT_NE(world.output.find("--set parallel.dp=2"), std::string::npos) << world.output;

  Result layers = train("err", "--nproc 8 --set parallel.pp=8");
  EXPECT_EQ(layers.status, 2) << layers.output;
  EXPECT_NE(layers.output.find("parallel.pp: expected at most model.n_layer = 4"), std::string::npos) << layers.output;

  Result batch = train("err", "--nproc 2 --set parallel.dp=2 --set parallel.micro_batches=3");
  EXPECT_EQ(batch.status, 2) << batch.output;
  EXPECT_NE(batch.output.find("train.batch_size: expected a multiple of parallel.dp x parallel.micro_batches"),
            std::string::npos) << batch.output;
}

TEST_F(ParallelTrainer, CheckpointIsWholeTensorsThatGenerateLoads) {
  // pp: the stages' parts merged; tp x pp: each stage's tp shards gathered, then the stages merged.
  for (auto [name, nproc, layout] :
       {std::tuple{"pp2_ckpt", 2, "--set parallel.pp=2 --set parallel.micro_batches=2"},
        std::tuple{"tp2_pp2_ckpt", 4, "--set parallel.tp=2 --set parallel.pp=2 --set parallel.micro_batches=2"}}) {
    SCOPED_TRACE(name);
    Result r = train(name, str_cat("--nproc ", nproc, " ", layout));
    ASSERT_EQ(r.status, 0) << r.output;
    auto dir = train::find_latest_checkpoint(root_ / name / "checkpoints");
    ASSERT_TRUE(dir);
    for (int rank = 0; rank < nproc; ++rank)
      EXPECT_TRUE(fs::exists(*dir / ("optimizer.rank" + std::to_string(rank) + ".safetensors"))) << rank;
    // The same names and shapes as the single process's checkpoint, and nearly the same values.
    auto mine = io::load_safetensors((*dir / "model.safetensors").string());
    auto ref = io::load_safetensors((*train::find_latest_checkpoint(root_ / "single" / "checkpoints") /
                                     "model.safetensors").string());
    ASSERT_EQ(mine.order.size(), ref.order.size());
    for (const auto& n : ref.order) {
      ASSERT_TRUE(mine.tensors.count(n)) << n;
      EXPECT_EQ(mine.tensors.at(n).sizes(), ref.tensors.at(n).sizes()) << n;
      auto a = to_dtype(ref.tensors.at(n), DType::f64).to_vector<double>();
      auto b = to_dtype(mine.tensors.at(n), DType::f64).to_vector<double>();
      double d = 0;
      for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
      EXPECT_LT(d, 1e-3) << n;
    }
    Result g = run_cli("generate --checkpoint " + (root_ / name).string() + " --prompt 春 --max-new-tokens 8");
    EXPECT_EQ(g.status, 0) << g.output;
    EXPECT_GT(g.output.size(), 3u);
  }
}

TEST_F(ParallelTrainer, ResumesBitIdenticallyInTheSameLayout) {
  const std::string layout = "--nproc 2 --set parallel.dp=2 --set parallel.zero=true";
  Result straight = train("resume_a", layout);
  ASSERT_EQ(straight.status, 0) << straight.output;
  Result first = train("resume_b", layout + " --set train.steps=6");
  ASSERT_EQ(first.status, 0) << first.output;
  Result rest = train("resume_b", layout + " --resume");
  ASSERT_EQ(rest.status, 0) << rest.output;
  EXPECT_NE(rest.output.find("resume: from"), std::string::npos) << rest.output;
  std::vector<Step> a = read_metrics(root_ / "resume_a"), b = read_metrics(root_ / "resume_b");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss) << "step " << i + 1;
  EXPECT_EQ(rest.output.find("re-cut"), std::string::npos) << rest.output;  // its own files, as saved
}
