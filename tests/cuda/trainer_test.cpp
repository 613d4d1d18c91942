// The trainer on one GPU (train.device = "cuda"): per-step losses track the same run on the
// CPU, resuming from a CUDA checkpoint is bit-identical, and the checkpoint samples the same
// text on either device. Skips without a usable GPU (tests/train/trainer_device_test.cpp checks
// the error a GPU-less machine gives instead).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cuda_test_util.h"
#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/train/generate.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

std::string run_dir(const std::string& name) { return trireme::testing::fresh_run_dir("trireme_cuda_trainer_" + name); }

// tests/train/trainer_test.cpp's tiny GPT on the Tang poems, with a gentler learning rate so that
// rounding differences between cuBLASLt and OpenBLAS stay small through Adam.
io::Config small_config(const std::string& out_dir, const std::string& device, int64_t steps, double dropout) {
  return trireme::testing::tiny_trainer_config(out_dir, steps, dropout,
                                      {"optim.lr=3e-3", "optim.grad_clip=1.0", "schedule.min_lr=3e-4",
                                       "train.device=" + device});
}

}  // namespace

// The same 20 steps from the same initial weights (initialised on the CPU, then moved) and the
// same batches: each step's loss within 1e-4 relative of the CPU's.
TEST(CudaTrainer, LossesMatchTheCpu) {
  TRIREME_REQUIRE_GPU();
  const std::string a = run_dir("cpu"), b = run_dir("gpu");
  train::TrainSummary cpu = train::Trainer(small_config(a, "cpu", 20, 0.0), {.quiet = true}).run();
  train::TrainSummary gpu = train::Trainer(small_config(b, "cuda", 20, 0.0), {.quiet = true}).run();
  ASSERT_EQ(cpu.losses.size(), 20u);
  ASSERT_EQ(gpu.losses.size(), 20u);
  double worst = 0;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    const double e = std::abs(gpu.losses[i] - cpu.losses[i]) / std::abs(cpu.losses[i]);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-4) << "step " << i + 1 << ": cpu " << cpu.losses[i] << " cuda " << gpu.losses[i];
  }
  EXPECT_LE(std::abs(gpu.final_val_loss - cpu.final_val_loss) / cpu.final_val_loss, 1e-4)
      << "validation: cpu " << cpu.final_val_loss << " cuda " << gpu.final_val_loss;
  EXPECT_LE(std::abs(gpu.initial_val_loss - cpu.initial_val_loss) / cpu.initial_val_loss, 1e-4);
  EXPECT_LT(gpu.final_loss, gpu.first_loss);
  std::printf("[ training ] trainer 20 steps: CPU loss %.5f -> %.5f, CUDA %.5f -> %.5f, worst relative gap %.2e\n",
              cpu.first_loss, cpu.final_loss, gpu.first_loss, gpu.final_loss, worst);

  // Peak memory comes from the GPU's allocator: a CUDA run reports its device bytes.
  std::ifstream metrics(gpu.metrics_path);
  std::string line;
  ASSERT_TRUE(std::getline(metrics, line));
  EXPECT_GT(nlohmann::json::parse(line).at("peak_memory_bytes").get<double>(), 0.0);

  // The CUDA run's checkpoint holds CPU tensors: it samples on the CPU, and greedily the same
  // text as on the GPU.
  train::TextGenerator on_cpu = train::load_generator(b);
  train::TextGenerator on_gpu = train::load_generator(b, Device::cuda(0));
  EXPECT_TRUE(on_gpu.model().parameters().front().device().is_cuda());
  const std::string want = on_cpu.generate("春", {.max_new_tokens = 8, .temperature = 0});
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(on_gpu.generate("春", {.max_new_tokens = 8, .temperature = 0}), want);
  fs::remove_all(a);
  fs::remove_all(b);
}

// Stopping after 10 steps and resuming (checkpoint written from the GPU, read back onto it)
// reproduces the uninterrupted run's losses exactly: the CUDA kernels are deterministic and
// dropout masks are a function of (seed, step, layer).
TEST(CudaTrainer, ResumeGivesBitIdenticalLosses) {
  TRIREME_REQUIRE_GPU();
  const std::string a = run_dir("straight"), b = run_dir("resumed");
  train::TrainSummary full = train::Trainer(small_config(a, "cuda", 20, 0.1), {.quiet = true}).run();
  ASSERT_EQ(full.losses.size(), 20u);
  train::TrainSummary first = train::Trainer(small_config(b, "cuda:0", 20, 0.1), {.quiet = true, .stop_after = 10}).run();
  train::TrainSummary rest = train::Trainer(small_config(b, "cuda", 20, 0.1), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(first.losses.size(), 10u);
  ASSERT_EQ(rest.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(first.losses[i], full.losses[i]) << "step " << i + 1;
    EXPECT_EQ(rest.losses[i], full.losses[10 + i]) << "step " << i + 11 << " after resuming";
  }
  EXPECT_EQ(rest.final_val_loss, full.final_val_loss);
  fs::remove_all(a);
  fs::remove_all(b);
}
