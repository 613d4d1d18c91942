// The llama architecture of models::GPT: its gradients against central finite differences in
// float64 (grouped-query attention, rotary embeddings, SwiGLU, RMSNorm and q/k/v biases composed
// from ops), its parameter count, and pipeline stages chained into the whole model.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/models/gpt.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"

using namespace trireme;

namespace {

models::GPTConfig llama(bool tie) {
  return {.arch = models::GPTArch::llama, .vocab_size = 11, .block_size = 6, .n_layer = 2, .n_head = 4, .d_model = 8,
          .bias = false, .tie_embeddings = tie, .ln_eps = 1e-6, .ffn = 6, .n_kv_head = 2, .rope_theta = 100.0,
          .qkv_bias = true};
}

Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t stream) {
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) t.data<int64_t>()[i] = int64_t(rng_uniform(3, stream, uint64_t(i)) * double(V)) % V;
  return t;
}

}  // namespace

TEST(LlamaArch, GradientsMatchFiniteDifferencesInF64) {
  for (bool tie : {true, false}) {
    models::GPT gpt(llama(tie), 3);
    gpt.to(DType::f64);
    {  // weights far from their initial values (norm gains 1, biases 0) so every path is exercised
      NoGradGuard no_grad;
      Generator gen(17);
      for (auto& [name, p] : gpt.named_parameters()) add_(p, randn(p.sizes(), gen, DType::f64), 0.3);
    }
    const Tensor x = tokens(2, 6, 11, 1), y = tokens(2, 6, 11, 2);
    gpt.zero_grad();
    gpt.loss(x, y).backward();
    NoGradGuard no_grad;
    double worst = 0;
    for (auto& [name, p] : gpt.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      const Tensor grad = contiguous(p.grad());
      const int64_t n = p.numel();
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t i = (k * 7919 + 13) % n;
        double* v = p.data<double>() + i;
        const double eps = 1e-6, saved = *v;
        *v = saved + eps;
        const double up = gpt.loss(x, y).item();
        *v = saved - eps;
        const double down = gpt.loss(x, y).item();
        *v = saved;
        const double fd = (up - down) / (2 * eps), an = grad.data<double>()[i];
        const double err = std::abs(fd - an) / (1e-6 + std::abs(fd));
        worst = std::max(worst, err);
        EXPECT_LT(std::abs(fd - an), 1e-6 + 1e-5 * std::abs(fd)) << name << "[" << i << "] tie=" << tie;
      }
    }
    EXPECT_LT(worst, 1e-3);
  }
}

TEST(LlamaArch, ParameterCountIsTheClosedForm) {
  for (bool tie : {true, false}) {
    models::GPT gpt(llama(tie), 1);
    int64_t n = 0;
    for (auto& [name, p] : gpt.named_parameters()) n += p.numel();
    EXPECT_EQ(n, llama(tie).num_parameters());
    EXPECT_FALSE(gpt.transformer->wpe) << "llama's positions are rotary";
  }
}

TEST(LlamaArch, ChainedPipelineStagesComputeTheWholeModel) {
  models::GPTConfig c = llama(true);
  c.n_layer = 3;
  NoGradGuard no_grad;
  models::GPT whole(c, 9);
  const Tensor x = tokens(2, 6, 11, 4);
  const Tensor want = whole.forward(x);
  Tensor h = x;
  for (int r = 0; r < 3; ++r) {
    models::GPT stage(c, models::GPTPlacement{.pipeline = {.stages = 3, .rank = r}}, 9);
    h = stage.forward_chunk(0, h);
  }
  EXPECT_EQ(max(abs(sub(h, want))).item(), 0.0);
}

TEST(LlamaArch, RefusesATensorParallelSplitOfKvHeads) {
  models::GPTConfig c = llama(true);
  c.n_kv_head = 1;
  try {
    models::GPT gpt(c, models::GPTPlacement{.tp = {nullptr, 2, 0}}, 1);
    ADD_FAILURE() << "tp 2 over one kv head was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_head (1) must be divisible by tp (2)"), std::string::npos) << e.what();
  }
}
