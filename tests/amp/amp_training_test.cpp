// Mixed precision end to end on the CPU: a tiny GPT with f32 master weights trained under bf16
// autocast (and f16 autocast with the loss scaler) tracks the f32 run; the trainer with
// train.precision = "bf16" and "f16" runs, reports the loss scale, and resumes bit-identically;
// a bad precision value is an error naming the key and the allowed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "amp_tiny_gpt.h"
#include "tiny_trainer_config.h"
#include "trireme/amp/autocast.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/factory.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/train/metrics.h"
#include "trireme/train/trainer.h"

namespace trireme {
namespace {

// 20 AdamW steps on the CPU (tests/amp_tiny_gpt.h).
std::vector<double> train_tiny_gpt(const std::string& precision, int64_t* skipped = nullptr) {
  return testing::train_tiny_gpt_amp(precision, {.steps = 20, .scaler = {.init_scale = 65536.0, .growth_interval = 5}},
                                     skipped);
}

// Tolerance: bf16 keeps 8 bits of mantissa, so each linear's output is off by ~0.4% relative;
// over 20 steps of Adam the losses drift apart (measured 1.6e-3 nats, held to 2e-2 for other
// BLAS builds and thread counts). f16 keeps 11 bits and tracks closer (measured 5.8e-4, held to 5e-3).
TEST(AmpTraining, TinyGptUnderAutocastTracksF32) {
  const auto f32 = train_tiny_gpt("f32");
  const auto bf16 = train_tiny_gpt("bf16");
  int64_t skipped = -1;
  const auto f16 = train_tiny_gpt("f16", &skipped);
  double gap_bf16 = 0, gap_f16 = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    gap_bf16 = std::max(gap_bf16, std::abs(bf16[i] - f32[i]));
    gap_f16 = std::max(gap_f16, std::abs(f16[i] - f32[i]));
  }
  std::printf("[ amp      ] loss f32 %.4f -> %.4f; max |bf16 - f32| %.2e, max |f16 - f32| %.2e, f16 skipped %lld\n",
              f32.front(), f32.back(), gap_bf16, gap_f16, (long long)skipped);
  EXPECT_LT(f32.back(), f32.front() - 1.0) << "the run learns";
  EXPECT_LE(gap_bf16, 0.02);
  EXPECT_LE(gap_f16, 0.005);
  EXPECT_GT(gap_bf16, 0.0) << "autocast changed nothing: the linears did not run in bf16";
  EXPECT_EQ(skipped, 0) << "a scale of 2^16 does not overflow this model's gradients";
}

std::string run_dir(const std::string& name) { return trireme::testing::fresh_run_dir("trireme_amp_" + name); }

io::Config amp_config(const std::string& out_dir, int64_t steps, const std::string& precision) {
  return trireme::testing::tiny_trainer_config(
      out_dir, steps, 0.1,
      {"optim.lr=1e-2", "schedule.min_lr=1e-3", "train.precision=\"" + precision + "\"",
       // 2^24 overflows f16 at first (skipped steps) and an interval of 3 grows the scale
       // again: both happen before and after the resume point.
       "train.loss_scale_init=16777216.0", "train.loss_scale_interval=3"});
}

TEST(AmpTraining, TrainerRunsAndResumesBitIdentically) {
  for (const std::string precision : {"bf16", "f16"}) {
    SCOPED_TRACE(precision);
    const std::string a = run_dir("straight_" + precision), b = run_dir("resumed_" + precision);
    train::TrainSummary full = train::Trainer(amp_config(a, 20, precision), {.quiet = true}).run();
    ASSERT_EQ(full.losses.size(), 20u);
    EXPECT_LT(full.final_val_loss, full.initial_val_loss);
    // Autocast is on: the first loss (same weights, same batch) differs from f32's in low bits.
    const std::string f32_dir = run_dir("f32");
    train::TrainSummary f32 = train::Trainer(amp_config(f32_dir, 20, "f32"), {.quiet = true, .stop_after = 1}).run();
    std::filesystem::remove_all(f32_dir);
    EXPECT_NE(full.losses[0], f32.losses[0]);
    EXPECT_NEAR(full.losses[0], f32.losses[0], 0.05);
    train::TrainSummary first = train::Trainer(amp_config(b, 20, precision), {.quiet = true, .stop_after = 10}).run();
    train::TrainSummary rest = train::Trainer(amp_config(b, 20, precision), {.resume = true, .quiet = true}).run();
    ASSERT_EQ(first.losses.size(), 10u);
    ASSERT_EQ(rest.losses.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_EQ(first.losses[i], full.losses[i]) << "step " << i + 1;
      EXPECT_EQ(rest.losses[i], full.losses[10 + i]) << "step " << i + 11 << " after resuming";
    }
    // The metrics show the loss scale and the skipped steps for f16 only.
    const auto rows = train::read_metrics(full.metrics_path);
    ASSERT_EQ(rows.size(), 20u);
    if (precision == "f16") {
      ASSERT_TRUE(rows.back().contains("loss_scale") && rows.back().contains("skipped_steps"));
      const int64_t skipped = rows.back()["skipped_steps"].get<int64_t>();
      EXPECT_GE(skipped, 1) << "a 2^24 scale overflows f16 gradients at first";
      EXPECT_LT(skipped, 20);
      const auto resumed_rows = train::read_metrics(rest.metrics_path);
      EXPECT_EQ(resumed_rows.back()["loss_scale"], rows.back()["loss_scale"]);
      EXPECT_EQ(resumed_rows.back()["skipped_steps"], rows.back()["skipped_steps"]);
    } else {
      EXPECT_FALSE(rows.back().contains("loss_scale"));
    }
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
  }
}

TEST(AmpTraining, BadPrecisionIsAClearError) {
  try {
    trireme::testing::tiny_trainer_config(run_dir("bad"), 1, 0.0, {"train.precision=\"fp8\""});
    FAIL() << "no error";
  } catch (const io::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("train.precision"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"f32\", \"bf16\", \"f16\""), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace trireme
