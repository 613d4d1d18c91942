// What the end-to-end LoRA layout tests share (lora_layouts_test.cpp, lora_sp_zero3_layouts_test.cpp):
// base models (gpt2 and llama, 4 steps of `trireme train`), LoRA runs with adapter dropout from
// them, and the check that a run in a parallel layout is the single process's run: the per-step
// losses and gradient norms (1e-4 relative), the final adapters, and the base weights of its
// checkpoint unchanged from the base model's.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "dist/parallel_cli.h"
#include "tiny_trainer_config.h"
#include "trireme/io/safetensors.h"
#include "trireme/models/lora.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/lora_adapters.h"

namespace trireme::finetune::testing {

namespace fs = std::filesystem;
using parallel::testing::Result;

class LoraLayoutsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_lora_layouts_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << parallel::testing::kConfig;
    // Prompt/response pairs whose response lengths differ, for finetune.task = "sft".
    trireme::testing::write_verse_sft_pairs((root_ / "sft.jsonl").string());
    for (const std::string arch : {"gpt2", "llama"}) {
      Result r = run(arch + "_base", arch, "--set train.steps=4");
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static std::string arch_keys(const std::string& arch) {
    return arch == "llama" ? " --set model.arch=llama --set model.bias=false --set model.n_kv_head=2" : "";
  }
  static std::string task_keys(const std::string& task) {
    if (task == "lm") return "";
    return " --set finetune.task=sft --set finetune.train_file=" + (root_ / "sft.jsonl").string() +
           " --set finetune.template={prompt}{response} ";
  }
  static Result run(const std::string& name, const std::string& arch, const std::string& extra) {
    const fs::path dir = root_ / name;
    const fs::path data = root_ / (arch + "_base") / "data";
    if (fs::exists(data) && !fs::exists(dir / "data")) {
      fs::create_directories(dir);
      fs::copy(data, dir / "data", fs::copy_options::recursive);
    }
    return parallel::testing::run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" +
                                      dir.string() + arch_keys(arch) + " " + extra);
  }
  static std::string lora_keys(const std::string& arch) {
    return " --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=0.01 " +
           std::string(arch == "llama" ? "--set lora.targets=[\\\"attn.q_proj\\\",\\\"attn.kv_proj\\\",\\\"mlp.c_proj\\\"] " : "");
  }
  // A LoRA run from the base model; with `resume`, the run's continuation.
  static Result lora(const std::string& name, const std::string& arch, const std::string& extra, bool resume = false) {
    const std::string from = resume ? "--resume " : "--init-from " + (root_ / (arch + "_base")).string();
    return run(name, arch, from + lora_keys(arch) + extra);
  }
  static fs::path latest(const std::string& name) {
    return *train::find_latest_checkpoint((root_ / name / "checkpoints").string());
  }

  // `name` run with `layout_args` (and the task's keys) against the single process's run of the task.
  static void expect_same_run(const std::string& arch, const std::string& name, const std::string& layout_args,
                              const std::string& task = "lm") {
    const std::string single = arch + "_lora_single" + (task == "lm" ? "" : "_" + task);
    if (!fs::exists(root_ / single / "metrics.jsonl")) {
      Result r = lora(single, arch, task_keys(task));
      ASSERT_EQ(r.status, 0) << r.output;
    }
    Result r = lora(name, arch, task_keys(task) + layout_args);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto a = parallel::testing::read_metrics(root_ / single), b = parallel::testing::read_metrics(root_ / name);
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), a.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max({worst, std::abs(b[i].loss - a[i].loss) / std::abs(a[i].loss),
                        std::abs(b[i].grad_norm - a[i].grad_norm) / std::abs(a[i].grad_norm)});
      EXPECT_NEAR(b[i].loss, a[i].loss, 1e-4 * std::abs(a[i].loss)) << name << " step " << i + 1;
      EXPECT_NEAR(b[i].grad_norm, a[i].grad_norm, 1e-4 * std::abs(a[i].grad_norm) + 1e-7) << name << " step " << i + 1;
    }
    std::printf("%s: worst relative difference %.3g\n", name.c_str(), worst);
    // The base weights stayed the base model's; the adapters trained.
    auto model = [](const std::string& run) { return train::load_checkpoint_model(latest(run)).model; };
    std::map<std::string, Tensor> base;
    for (auto& [n, t] : model(arch + "_base")) base[n] = t;
    // adapters.safetensors holds every adapter of the model file (every pipeline stage's), and
    // they are the single process's.
    const auto file = train::load_adapters(latest(name) / "adapters.safetensors");
    const auto single_file = train::load_adapters(latest(single) / "adapters.safetensors");
    size_t adapters = 0;
    double adapter_worst = 0;
    for (auto& [n, t] : model(name)) {
      if (models::is_lora_name(n)) {
        ++adapters;
        ASSERT_TRUE(file.tensors.count(n)) << n << " is not in adapters.safetensors of " << name;
        EXPECT_EQ(t.to_vector<float>(), file.tensors.at(n).to_vector<float>()) << n;
        ASSERT_TRUE(single_file.tensors.count(n)) << n << " is not in the single process's adapters";
        const auto x = t.to_vector<float>(), y = single_file.tensors.at(n).to_vector<float>();
        ASSERT_EQ(x.size(), y.size()) << n;
        for (size_t i = 0; i < x.size(); ++i) {
          adapter_worst = std::max(adapter_worst, double(std::abs(x[i] - y[i])));
          ASSERT_NEAR(x[i], y[i], 1e-4 * (1 + std::abs(y[i]))) << n << " element " << i << " in " << name;
        }
        continue;
      }
      const auto x = t.to_vector<float>(), y = base.at(n).to_vector<float>();
      ASSERT_EQ(x, y) << n << " changed in " << name;
    }
    std::printf("%s: final adapters within %.3g of the single process's\n", name.c_str(), adapter_worst);
    EXPECT_GT(adapters, 0u);
    EXPECT_EQ(file.tensors.size(), adapters);
    EXPECT_EQ(single_file.tensors.size(), adapters);
  }

  inline static fs::path root_;
};

}  // namespace trireme::finetune::testing
