// train.mode = "static" for fine-tuning: SFT (each micro-batch's loss weighted by its share of the
// global batch's counted targets, a per-step argument of the graph), classification (the head and
// its one counted target per sample) and LoRA (frozen base weights, adapter dropout replayed per
// step) train as eager does, bit for bit: every step's loss, gradient norm and validation loss,
// and every tensor of the final checkpoint, with dropout on; in one process and over Gloo, also
// with recomputation, with SGD, under bf16 with ZeRO-2, and inside pipelines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "dist/parallel_cli.h"
#include "trireme/io/safetensors.h"
#include "trireme/ops/copy.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

class StaticFinetune : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_static_finetune_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
    const std::string verse = "床前明月光疑是地上霜举头望明月低头思故乡";
    std::ofstream sft(root_ / "sft.jsonl");  // responses of 1 to 5 characters: unequal counts per micro-batch
    for (int i = 0; i < 60; ++i) {
      const size_t len = size_t(1 + i % 5), at = size_t(i % 15);
      sft << "{\"prompt\": \"" << verse.substr(3 * at, 3) << "\", \"response\": \"" << verse.substr(3 * at + 3, 3 * len)
          << "\"}\n";
    }
    sft.close();
    std::ofstream cls(root_ / "classify.jsonl");
    const char* labels[] = {"月", "霜", "乡"};
    for (int i = 0; i < 60; ++i) {
      const size_t len = size_t(2 + (i * 7) % 11), at = size_t((i * 5) % (20 - len / 2));
      cls << "{\"text\": \"" << verse.substr(3 * at, 3 * std::min(len, 20 - at)) << "\", \"label\": \""
          << labels[(i + at) % 3] << "\"}\n";
    }
    cls.close();
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.steps=4 --set train.out_dir=" +
                       (root_ / "base").string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // Fine-tunes the base model for `steps` steps, eagerly (name_eager) and in static mode
  // (name_static), and compares the two runs bit for bit.
  static void expect_static_equals_eager(const std::string& name, int steps, const std::string& extra) {
    const std::string common = " --set model.dropout=0.1 --set train.steps=" + std::to_string(steps) +
                               " --set train.eval_interval=5 --set train.checkpoint_interval=" + std::to_string(steps) +
                               " --set optim.grad_clip=0.5 " + extra;
    Result r = run(name + "_eager", common);
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(name + "_static", common + " --set train.mode=static");
    ASSERT_EQ(r.status, 0) << r.output;
    const auto a = metrics(root_ / (name + "_eager")), b = metrics(root_ / (name + "_static"));
    ASSERT_EQ(a.size(), size_t(steps));
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << name << " step " << i + 1;
      EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>()) << name << " step " << i + 1;
      if (a[i].contains("val_loss") && a[i]["val_loss"].is_number())
        EXPECT_EQ(b[i]["val_loss"].get<double>(), a[i]["val_loss"].get<double>()) << name << " step " << i + 1;
      EXPECT_EQ(b[i].value("graph_traces", int64_t(-1)), i == 0 ? 0 : 1) << name << " step " << i + 1;
    }
    char step_dir[32];
    std::snprintf(step_dir, sizeof step_dir, "step_%08d", steps);
    const fs::path ea = root_ / (name + "_eager") / "checkpoints" / step_dir;
    const fs::path st = root_ / (name + "_static") / "checkpoints" / step_dir;
    int files = 0;
    for (const auto& entry : fs::directory_iterator(ea)) {
      if (entry.path().extension() != ".safetensors") continue;
      ++files;
      expect_same_tensors(entry.path(), st / entry.path().filename());
    }
    EXPECT_GE(files, 2) << ea;  // the model and the optimizer at least
  }

  static Result run(const std::string& name, const std::string& extra) {
    return run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + (root_ / name).string() +
                   " --init-from " + (root_ / "base").string() + " " + extra);
  }

  static std::vector<nlohmann::json> metrics(const fs::path& dir) {
    std::vector<nlohmann::json> out;
    std::ifstream f(dir / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  static void expect_same_tensors(const fs::path& a, const fs::path& b) {
    ASSERT_TRUE(fs::exists(b)) << b;
    io::SafetensorsFile fa = io::load_safetensors(a.string()), fb = io::load_safetensors(b.string());
    ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a;
    for (const auto& [name, t] : fa.tensors) {
      ASSERT_TRUE(fb.tensors.count(name)) << b << " has no " << name;
      const Tensor x = contiguous(t), y = contiguous(fb.tensors.at(name));
      ASSERT_EQ(x.sizes(), y.sizes()) << name;
      ASSERT_EQ(x.dtype(), y.dtype()) << name;
      EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()), 0)
          << a.parent_path().parent_path().parent_path().filename() << ": " << a.filename() << ": " << name;
    }
  }

  static std::string sft() {
    return "--set finetune.task=sft --set finetune.template={prompt}{response} --set finetune.train_file=" +
           (root_ / "sft.jsonl").string();
  }
  static std::string classify() {
    return "--set finetune.task=classify --set finetune.train_file=" + (root_ / "classify.jsonl").string();
  }
  static std::string lora() { return " --set lora.rank=4 --set lora.dropout=0.1 "; }

  static fs::path root_;
};

fs::path StaticFinetune::root_;

}  // namespace

TEST_F(StaticFinetune, SftWithMicroBatchesEqualsEager) {
  expect_static_equals_eager("sft", 20, sft() + " --set parallel.micro_batches=2");
}

TEST_F(StaticFinetune, SftDataParallelEqualsEager) {
  expect_static_equals_eager("sft_dp2", 10, sft() + " --nproc 2 --set parallel.dp=2");
}

TEST_F(StaticFinetune, ClassificationEqualsEager) { expect_static_equals_eager("classify", 20, classify()); }

TEST_F(StaticFinetune, LoraWithAdapterDropoutEqualsEager) { expect_static_equals_eager("lora", 20, sft() + lora()); }

TEST_F(StaticFinetune, LoraTensorParallelEqualsEager) {
  expect_static_equals_eager("lora_tp2", 10, sft() + lora() + " --nproc 2 --set parallel.tp=2");
}

// The other lifted cases inside a fine-tuning run over Gloo: recomputation (the checkpointed
// blocks' forwards, with the model's and the adapters' dropout, re-run inside the traced backward
// while the reducer's hooks fire) and SGD (its learning rate refreshed per replay).
TEST_F(StaticFinetune, LoraWithRecomputationDataParallelEqualsEager) {
  expect_static_equals_eager("lora_recompute_dp2", 10,
                             sft() + lora() + " --set memory.recompute=full --nproc 2 --set parallel.dp=2");
}

TEST_F(StaticFinetune, SftWithSgdTensorParallelEqualsEager) {
  expect_static_equals_eager("sft_sgd_tp2", 10,
                             sft() + " --set optim.name=sgd --set optim.momentum=0.9 --set optim.lr=0.05 "
                                     "--set schedule.kind=cosine --set schedule.warmup_steps=3 --nproc 2 --set parallel.tp=2");
}

TEST_F(StaticFinetune, LoraUnderBf16WithZero2EqualsEager) {
  expect_static_equals_eager("lora_bf16_zero2", 10,
                             sft() + lora() + " --set train.precision=bf16 --nproc 2 --set parallel.dp=2 --set parallel.zero=2");
}

// Inside a pipeline: each micro-batch's loss weight (its share of the counted targets) is read
// again by every replay of the stages' traced steps; LoRA's frozen base and adapter dropout as
// in one process; classification's head on the last stage.
TEST_F(StaticFinetune, SftPipelineEqualsEager) {
  expect_static_equals_eager("sft_pp2", 10, sft() + " --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
}

TEST_F(StaticFinetune, LoraPipelineEqualsEager) {
  expect_static_equals_eager("lora_pp2", 10,
                             sft() + lora() + " --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
}

TEST_F(StaticFinetune, ClassificationPipelineEqualsEager) {
  expect_static_equals_eager("classify_pp2", 10, classify() + " --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
}
