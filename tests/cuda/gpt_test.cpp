// The GPT on one GPU: PyTorch parity from the fixture (tests/fixtures/gpt_parity.safetensors, see
// tests/models/gpt_parity_test.cpp) with the model moved to CUDA, and a short training run whose
// losses track the same run on the CPU.
//
// Tolerance: f32 GEMMs through cuBLASLt with CUBLAS_COMPUTE_32F (no TF32) differ from OpenBLAS
// and PyTorch only in summation order and fused multiply-adds, so logits, loss and gradients are
// held to the CPU test's 1e-5 relative (max |a - b| / max |b| over each tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cuda_test_util.h"
#include "gpt_parity_fixture.h"
#include "trireme/io/safetensors.h"
#include "trireme/models/gpt.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/optim/lr_schedule.h"

namespace trireme {
namespace {

constexpr double kRelTol = 1e-5;

double host_item(const Tensor& t) { return to_device(t.detach(), Device::cpu()).item(); }

using trireme::testing::rel_error;

// The parity fixture with the model on the GPU.
struct Fixture : trireme::testing::GptParityFixture {
  Tensor cuda(const std::string& name) const { return to_device(get(name), Device::cuda(0)); }
  std::unique_ptr<models::GPT> model_on_gpu() const {
    auto gpt = model();
    gpt->to(Device::cuda(0));
    return gpt;
  }
};

TEST(CudaGPT, ParityWithPyTorch) {
  TRIREME_REQUIRE_GPU();
  Fixture f;
  auto gpt = f.model_on_gpu();
  for (const auto& [name, p] : gpt->named_parameters()) ASSERT_TRUE(p.device().is_cuda()) << name;
  Tensor logits = gpt->forward(f.cuda("ids"));
  ASSERT_TRUE(logits.device().is_cuda());
  const double e_logits = rel_error(logits, f.get("logits"));
  EXPECT_LE(e_logits, kRelTol);
  Tensor loss = gpt->loss(f.cuda("ids"), f.cuda("targets"));
  const double e_loss = std::abs(host_item(loss) - f.get("loss").item()) / std::abs(f.get("loss").item());
  EXPECT_LE(e_loss, kRelTol);
  loss.backward();
  const auto ref = f.group("grad");
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, p] : gpt->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const double e = rel_error(p.grad(), ref.at(name));
    EXPECT_LE(e, kRelTol) << "gradient of " << name;
    if (e > worst) worst = e, worst_name = name;
  }
  std::printf("[ parity   ] CUDA vs PyTorch relative error: logits %.2e, loss %.2e, worst gradient %.2e (%s)\n",
              e_logits, e_loss, worst, worst_name.c_str());

  // Two AdamW steps from PyTorch's gradients, each compared at 1e-5.
  auto params = gpt->named_parameters();
  optim::AdamW opt(params, f.adamw());
  for (const char* step : {"1", "2"}) {
    const auto grads = f.group(step == std::string("1") ? "grad" : "grad2");
    for (const auto& [name, p] : params) p.set_grad(to_device(grads.at(name), Device::cuda(0)));
    opt.step();
    const auto want = f.group(std::string("step") + step);
    for (const auto& [name, p] : params) EXPECT_LE(rel_error(p, want.at(name)), kRelTol) << "step " << step << " " << name;
  }
}

// The same tiny training run (tests/models/gpt_train_test.cpp) on both devices from the same
// initial weights: the losses must agree step by step (rounding differences grow slowly through
// Adam; 1e-3 relative over 40 steps) and fall well below ln(V).
TEST(CudaGPT, TrainingTracksTheCpu) {
  TRIREME_REQUIRE_GPU();
  models::GPTConfig c{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .d_model = 32};
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t t = 0; t < 17; ++t) {
      const int64_t tok = int64_t(rng_uniform(99, uint64_t(b), uint64_t(t)) * 64) % 64;
      if (t < 16) ids.push_back(tok);
      if (t > 0) targets.push_back(tok);
    }
  }
  auto run = [&](Device device) {
    models::GPT gpt(c, /*seed=*/5);
    gpt.to(device);
    Tensor x = to_device(from_vector<int64_t>(ids, {4, 16}), device);
    Tensor y = to_device(from_vector<int64_t>(targets, {4, 16}), device);
    optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1});
    optim::WarmupCosineLr schedule({.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 5, .total_steps = 40});
    std::vector<double> losses;
    for (int64_t step = 0; step < 40; ++step) {
      opt.zero_grad();
      Tensor loss = gpt.loss(x, y);
      losses.push_back(host_item(loss));
      loss.backward();
      optim::clip_grad_norm(opt.params(), 1.0);
      opt.set_lr(schedule.lr(step));
      opt.step();
    }
    return losses;
  };
  const auto cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double e = std::abs(gpu[i] - cpu[i]) / std::abs(cpu[i]);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-3) << "step " << i << ": cpu " << cpu[i] << " gpu " << gpu[i];
  }
  std::printf("[ training ] 40 steps: CPU loss %.5f -> %.5f, CUDA %.5f -> %.5f, worst relative gap %.2e\n", cpu.front(),
              cpu.back(), gpu.front(), gpu.back(), worst);
  EXPECT_LT(gpu.back(), 0.5 * gpu.front());
}

}  // namespace
}  // namespace trireme
