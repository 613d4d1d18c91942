// Shared by tests/amp and tests/cuda: a tiny GPT (2 layers, d_model 32, vocab 64) with f32 master
// weights trained on a fixed learnable token sequence under autocast, so the CPU and CUDA mixed
// precision tests train the same thing.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trireme/amp/autocast.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/core/rng.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"

namespace trireme::testing {

struct TinyAmpRun {
  Device device = Device::cpu();
  int steps = 20;
  amp::GradScalerOptions scaler{};  // used by the f16 run
};

// `steps` AdamW steps in `precision` ("f32", "bf16", or "f16" with the scaler); returns the
// losses and, if asked, how many steps the scaler skipped. Parameters and their gradients stay
// f32 and the loss comes out f32 (checked on every step).
inline std::vector<double> train_tiny_gpt_amp(const std::string& precision, const TinyAmpRun& run,
                                              int64_t* skipped = nullptr) {
  models::GPTConfig c{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .d_model = 32};
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t t = 0; t < 17; ++t) {
      // A learnable sequence: each token follows from the previous one, with some noise.
      const int64_t tok = (b * 5 + t * 3 + (rng_uniform(7, uint64_t(b), uint64_t(t)) < 0.2 ? 1 : 0)) % 64;
      if (t < 16) ids.push_back(tok);
      if (t > 0) targets.push_back(tok);
    }
  }
  models::GPT gpt(c, /*seed=*/5);
  gpt.to(run.device);
  Tensor x = to_device(from_vector<int64_t>(ids, {4, 16}), run.device);
  Tensor y = to_device(from_vector<int64_t>(targets, {4, 16}), run.device);
  optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1});
  amp::GradScaler scaler(run.scaler);
  const bool f16 = precision == "f16";
  std::vector<double> losses;
  for (int step = 0; step < run.steps; ++step) {
    Tensor loss;
    {
      amp::AutocastGuard autocast(run.device.type, f16 ? DType::f16 : DType::bf16, precision != "f32");
      loss = gpt.loss(x, y);
    }
    EXPECT_EQ(loss.dtype(), DType::f32);
    losses.push_back(to_device(loss.detach(), Device::cpu()).item());
    (f16 ? scaler.scale(loss) : loss).backward();
    bool ok = true;
    if (f16) {
      std::vector<Tensor> grads;
      for (const auto& [name, p] : opt.params()) grads.push_back(p.grad());
      scaler.unscale(grads);
      ok = scaler.update();
    }
    for (const auto& [name, p] : opt.params()) {
      EXPECT_EQ(p.dtype(), DType::f32) << name;
      EXPECT_EQ(p.grad().dtype(), DType::f32) << name;
    }
    if (ok) {
      optim::clip_grad_norm(opt.params(), 1.0);
      opt.step();
    }
    opt.zero_grad();
  }
  if (skipped) *skipped = scaler.skipped_steps();
  return losses;
}

}  // namespace trireme::testing
