// Sequence classification in every layout against one process, end to end (`trireme train
// --nproc 2`): from the same base checkpoint, with dropout, texts longer than a block and a
// validation set that is not a whole number of batches, two micro-batches, dp = 2, ZeRO-1, 2 and
// 3, tp = 2 (with sequence parallelism, and with recomputation) and pp = 2 (also interleaved) log
// the one-process per-step losses and gradient norms and validation loss (1e-4 relative),
// accuracy and macro-F1, and end with the one-process classifier head (so its gradient is reduced
// over dp and not summed over tp); so do LoRA runs (adapters and head) under dp = 2, pp = 2,
// tp = 2 with sequence parallelism and ZeRO-3 against a LoRA run in one process, whose base
// weights stay the base model's. A pipeline run resumed halfway logs the
// uninterrupted run's metrics bit for bit (resumed under tp = 2 instead, one process's), and bf16
// autocast under tp = 2 starts as one process does (to bf16's precision).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "dist/parallel_cli.h"
#include "trireme/models/lora.h"
#include "trireme/train/checkpoint.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

struct Evaluation {
  double loss = 0, accuracy = 0, macro_f1 = 0;
};

// The metrics lines that hold a validation.
std::vector<Evaluation> read_evaluations(const fs::path& out_dir) {
  std::vector<Evaluation> out;
  std::ifstream f(out_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_accuracy"))
      out.push_back({j["val_loss"].get<double>(), j["val_accuracy"].get<double>(), j["val_macro_f1"].get<double>()});
  }
  return out;
}

std::map<std::string, Tensor> final_model(const fs::path& run) {
  const auto dir = train::find_latest_checkpoint((run / "checkpoints").string());
  EXPECT_TRUE(dir.has_value()) << run;
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : train::load_checkpoint_model(*dir).model) out[name] = t;
  return out;
}

class ClassifyLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_classify_layouts_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
    // Three labels, texts of 2 to 12 characters (block_size is 8: the longer ones are cut).
    const std::string verse = "床前明月光疑是地上霜举头望明月低头思故乡";
    const char* labels[] = {"月", "霜", "乡"};
    auto write = [&](const fs::path& path, int n, int offset) {
      std::ofstream data(path);
      for (int i = offset; i < offset + n; ++i) {
        const size_t len = size_t(2 + (i * 7) % 11), at = size_t((i * 5) % (20 - len / 2));
        data << "{\"text\": \"" << verse.substr(3 * at, 3 * std::min(len, 20 - at)) << "\", \"label\": \""
             << labels[(i + at) % 3] << "\"}\n";
      }
    };
    write(root_ / "train.jsonl", 48, 0);
    write(root_ / "val.jsonl", 12, 100);  // 12: one whole batch of 8 and part of the next
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.steps=4 --set train.out_dir=" +
                       (root_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
    r = classify("single", "");
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A fresh run from the base model, or with --resume in `extra` the run's continuation.
  static Result classify(const std::string& name, const std::string& extra) {
    const bool resume = extra.find("--resume") != std::string::npos;
    return run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + (root_ / name).string() +
                   (resume ? "" : " --init-from " + (root_ / "base").string()) + " --set finetune.task=classify" +
                   " --set finetune.train_file=" + (root_ / "train.jsonl").string() +
                   " --set finetune.val_file=" + (root_ / "val.jsonl").string() +
                   " --set model.dropout=0.1 " + extra);
  }

  // Runs `name` with `extra` and compares it with the run `reference` (one process).
  static void expect_same(const std::string& name, const std::string& extra, const std::string& reference = "single") {
    Result r = classify(name, extra);
    ASSERT_EQ(r.status, 0) << r.output;
    expect_same_metrics(name, reference, 1e-4);
    // The head ends where one process's does: its gradient was averaged over dp, not summed over tp.
    const auto ours = final_model(root_ / name), theirs = final_model(root_ / reference);
    for (const std::string n : {"classifier.weight", "classifier.bias"}) {
      ASSERT_TRUE(ours.count(n)) << n << " is not in " << name << "'s checkpoint";
      const auto u = ours.at(n).to_vector<float>(), v = theirs.at(n).to_vector<float>();
      ASSERT_EQ(u.size(), v.size());
      for (size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(u[i], v[i], 1e-4) << name << " " << n << "[" << i << "]";
    }
  }

  // The per-step losses and gradient norms and the validations of runs `name` and `reference`
  // agree to `tolerance`, relative; accuracy and macro-F1 exactly.
  static void expect_same_metrics(const std::string& name, const std::string& reference, double tolerance) {
    const auto a = read_metrics(root_ / reference), b = read_metrics(root_ / name);
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i].loss, a[i].loss, tolerance * std::abs(a[i].loss)) << name << " step " << i + 1;
      EXPECT_NEAR(b[i].grad_norm, a[i].grad_norm, tolerance * std::abs(a[i].grad_norm)) << name << " step " << i + 1;
    }
    const auto x = read_evaluations(root_ / reference), y = read_evaluations(root_ / name);
    ASSERT_EQ(x.size(), 2u);
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(y[i].loss, x[i].loss, tolerance * x[i].loss) << name << " evaluation " << i + 1;
      EXPECT_EQ(y[i].accuracy, x[i].accuracy) << name << " evaluation " << i + 1;
      EXPECT_EQ(y[i].macro_f1, x[i].macro_f1) << name << " evaluation " << i + 1;
    }
  }

  static fs::path root_;
};

fs::path ClassifyLayouts::root_;

}  // namespace

TEST_F(ClassifyLayouts, MicroBatchesMatchOneProcess) { expect_same("mb2", "--set parallel.micro_batches=2"); }

TEST_F(ClassifyLayouts, DataParallelMatchesOneProcess) { expect_same("dp2", "--nproc 2"); }

TEST_F(ClassifyLayouts, ZeroMatchesOneProcess) {
  for (const std::string stage : {"1", "2", "3"})
    expect_same("zero" + stage, "--nproc 2 --set parallel.zero=" + stage);
}

TEST_F(ClassifyLayouts, TensorParallelMatchesOneProcess) { expect_same("tp2", "--nproc 2 --set parallel.tp=2"); }

TEST_F(ClassifyLayouts, SequenceParallelMatchesOneProcess) {
  expect_same("sp2", "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true");
}

TEST_F(ClassifyLayouts, RecomputationMatchesOneProcess) {
  expect_same("tp2_recompute", "--nproc 2 --set parallel.tp=2 --set memory.recompute=full");
}

TEST_F(ClassifyLayouts, PipelineMatchesOneProcess) {
  expect_same("pp2", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
  // Four virtual stages on two ranks: the head on rank 1's second chunk.
  expect_same("pp2_interleaved", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2 "
                                 "--set parallel.schedule=interleaved --set parallel.virtual_stages=2");
}

TEST_F(ClassifyLayouts, LoraMatchesOneProcess) {
  const std::string lora = "--set lora.rank=4 --set lora.alpha=8 ";
  Result r = classify("lora_single", lora);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same("lora_dp2", lora + "--nproc 2", "lora_single");
  expect_same("lora_pp2", lora + "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2", "lora_single");
  expect_same("lora_sp2", lora + "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true", "lora_single");
  expect_same("lora_zero3", lora + "--nproc 2 --set parallel.zero=3", "lora_single");
  // Only the adapters and the head trained.
  const auto base = final_model(root_ / "base");
  for (const std::string run : {"lora_pp2", "lora_sp2", "lora_zero3"}) {
    for (const auto& [name, t] : final_model(root_ / run)) {
      if (models::is_lora_name(name) || name.rfind("classifier.", 0) == 0) continue;
      ASSERT_EQ(t.to_vector<float>(), base.at(name).to_vector<float>()) << name << " changed in " << run;
    }
  }
}

TEST_F(ClassifyLayouts, ResumesInItsLayoutAndAnother) {
  // A pipeline run stopped at step 6 and resumed to 12 logs what the uninterrupted run logs, bit
  // for bit.
  const std::string pp2 = "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2 ";
  Result r = classify("pp2_whole", pp2);
  ASSERT_EQ(r.status, 0) << r.output;
  r = classify("pp2_parts", pp2 + "--set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  r = classify("pp2_parts", pp2 + "--resume");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_metrics("pp2_parts", "pp2_whole", 0.0);
  // Resumed in another layout, the optimizer state re-cut for it: one process's run to 1e-4.
  r = classify("pp2_then_tp2", pp2 + "--set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  r = classify("pp2_then_tp2", "--resume --nproc 2 --set parallel.tp=2");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_metrics("pp2_then_tp2", "single", 1e-4);
}

TEST_F(ClassifyLayouts, AutocastMatchesOneProcess) {
  // bf16 rounds each layout's partial sums differently, and the differences compound over the
  // steps: the first step (the same weights) agrees to bf16's precision, and every step trains.
  Result r = classify("bf16_single", "--set train.precision=bf16");
  ASSERT_EQ(r.status, 0) << r.output;
  r = classify("bf16_tp2", "--set train.precision=bf16 --nproc 2 --set parallel.tp=2");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto a = read_metrics(root_ / "bf16_single"), b = read_metrics(root_ / "bf16_tp2");
  ASSERT_EQ(b.size(), 12u);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NEAR(b[0].loss, a[0].loss, 1e-2 * a[0].loss);
  EXPECT_NEAR(b[0].grad_norm, a[0].grad_norm, 1e-2 * a[0].grad_norm);
  for (const auto& step : b) EXPECT_TRUE(std::isfinite(step.loss) && std::isfinite(step.grad_norm));
  EXPECT_EQ(read_evaluations(root_ / "bf16_tp2").size(), 2u);
}
