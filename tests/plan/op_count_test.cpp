// The ops' counting scope, and the model's costs fitted from it.
#include "trireme/ops/op_count.h"

#include <gtest/gtest.h>

#include "trireme/core/rng.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"
#include "trireme/plan/model_costs.h"

namespace trireme {
namespace {

TEST(OpCount, CountsProductsForwardAndBackward) {
  Generator gen(1);
  Tensor a = randn({3, 5}, gen), b = randn({5, 7}, gen);
  a.set_requires_grad(true);
  OpCounts forward, all;
  {
    OpCountScope outer(all);
    Tensor y;
    {
      OpCountScope inner(forward);
      y = matmul(a, b);
    }
    sum(y).backward();  // grad_a = g bᵀ: one more product of the same size
  }
  EXPECT_DOUBLE_EQ(forward.matmul_flops, 2.0 * 3 * 5 * 7);
  EXPECT_EQ(forward.matmul_calls, 1);
  EXPECT_DOUBLE_EQ(forward.matmul_bytes, 4.0 * (3 * 5 + 5 * 7 + 3 * 7));
  EXPECT_DOUBLE_EQ(all.matmul_flops, 2 * 2.0 * 3 * 5 * 7);
}

TEST(OpCount, LinearAndBatchedProducts) {
  Generator gen(1);
  OpCounts c;
  {
    OpCountScope scope(c);
    (void)linear(randn({2, 4, 8}, gen), randn({16, 8}, gen));    // 8 rows x 8 -> 16
    (void)matmul(randn({3, 2, 4}, gen), randn({3, 4, 6}, gen));  // 3 products 2x4x6
  }
  EXPECT_DOUBLE_EQ(c.matmul_flops, 2.0 * 8 * 16 * 8 + 3 * 2.0 * 2 * 4 * 6);
}

TEST(OpCount, NothingIsCountedOutsideAScope) {
  Generator gen(1);
  OpCounts c;
  { OpCountScope scope(c); }
  (void)matmul(randn({2, 2}, gen), randn({2, 2}, gen));
  EXPECT_EQ(c.matmul_calls, 0);
}

TEST(ModelCosts, FitTheDecoderBlocksProducts) {
  io::ModelConfig m;
  m.bias = false;
  m.tie_embeddings = true;
  const plan::ModelCosts c = plan::measure_model_costs(m);
  // q, k, v, projection (4 d²) and the MLP (8 d²): 2 FLOP each forward, twice that backward.
  EXPECT_NEAR(c.block_mm_d2, 72, 1e-6);
  EXPECT_NEAR(c.block_mm_d, 0, 1e-6);
  // Causal attention: half of 4 T d forward and 10 T d backward per token.
  EXPECT_NEAR(c.block_attn_td, 7, 1e-9);
  // The head: (d x V) forward, and its two gradients.
  EXPECT_NEAR(c.head_dv, 6, 1e-6);
  EXPECT_NEAR(c.forward_share, 1.0 / 3, 0.01);
  // A full recomputation's replay (measured at d 64, T 16): the forward's attention and its
  // products but the MLP's second (16 of 24 d²), against the block's 72 d² + 7 T d per token.
  EXPECT_NEAR(c.replay_share, (16.0 * 64 * 64 + 2.0 * 16 * 64) / (72.0 * 64 * 64 + 7.0 * 16 * 64), 1e-6);
  EXPECT_LT(c.fit_error, 1e-6);
  EXPECT_GT(c.block_mem_d, 0);
  EXPECT_GT(c.block_kernels, 0);
}

}  // namespace
}  // namespace trireme
