// ZeRO stages 2 and 3 without processes: units get buckets of their own, ZeRO-2 keeps no bucket
// and no parameter gradient after a backward, every stage on one rank equals AdamW (micro-batches
// included), and a released storage refuses to be read.
#include <gtest/gtest.h>

#include "gpt_test_data.h"

#include <cmath>

#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/parallel/zero.h"

using namespace trireme;
using namespace trireme::parallel;
using trireme::parallel::testing::max_abs_diff;
using trireme::parallel::testing::tokens;

namespace {

models::GPTConfig tiny_config() { return {.vocab_size = 61, .block_size = 8, .n_layer = 3, .n_head = 4, .d_model = 32}; }

}  // namespace

TEST(AssignBuckets, UnitsGetABucketEachWhereTheirLastParameterFalls) {
  // Parameters 0..5; unit {1, 2}, unit {4}; 1 MiB buckets would hold everything together.
  std::vector<std::pair<int64_t, DType>> p(6, {10, DType::f32});
  auto b = assign_buckets(p, 1 << 20, /*pad_to=*/4, {{1, 2}, {4}});
  ASSERT_EQ(b.size(), 5u);  // {5}, unit {4}, {3}, unit {2, 1}, {0}
  EXPECT_EQ(b[0].unit, -1);
  EXPECT_EQ(b[1].unit, 1);
  EXPECT_EQ(b[1].slots[0].param, 4u);
  EXPECT_EQ(b[3].unit, 0);
  ASSERT_EQ(b[3].slots.size(), 2u);
  EXPECT_EQ(b[3].slots[0].param, 2u);
  EXPECT_EQ(b[3].slots[1].offset, 10);
  EXPECT_EQ(b[3].numel, 20);
  EXPECT_EQ(b[4].slots[0].param, 0u);
  EXPECT_EQ(b[4].numel, 12);  // padded
  EXPECT_THROW(assign_buckets(p, 1 << 20, 1, {{1}, {1}}), Error);
}

TEST(ZeroStage2, KeepsNoBucketAndNoParameterGradientAfterABackward) {
  models::GPT a(tiny_config(), 5);
  Reducer reducer(a.named_parameters(), nullptr, {.bucket_bytes = 4 << 10, .zero = 2});
  reducer.prepare_backward();
  a.loss(tokens(2, 8, 0), tokens(2, 8, 1)).backward();
  reducer.finish();
  for (size_t b = 0; b < reducer.buckets().size(); ++b) {
    EXPECT_FALSE(reducer.bucket_buffer(b).defined()) << "bucket " << b;
    EXPECT_GT(max_abs_diff(reducer.shard_grad(b), zeros_like(reducer.shard_grad(b))), 0) << "bucket " << b;
  }
  for (const auto& [name, p] : a.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
}

// Every stage on one rank is AdamW: the same norms and parameters over steps of two micro-batches
// (ZeRO-2/3 reduce each backward into the shard gradients, which must add up).
TEST(ZeroStages, OneRankEqualsAdamWWithMicroBatches) {
  const optim::AdamWOptions o{.lr = 1e-2, .weight_decay = 0.1};
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("ZeRO-" + std::to_string(stage));
    models::GPT a(tiny_config(), 5), b(tiny_config(), 5);
    Reducer reducer(a.named_parameters(), nullptr,
                    {.bucket_bytes = 4 << 10, .zero = stage, .units = stage == 3 ? models::block_parameter_indices(a) : std::vector<std::vector<size_t>>{}});
    std::unique_ptr<FullyShardedParams> sharded;
    if (stage == 3) {
      sharded = models::shard_blocks(a, reducer);
      EXPECT_EQ(sharded->num_units(), 3u);
    }
    ZeroOptimizer zero(reducer, o, sharded.get());
    optim::AdamW adamw(b.named_parameters(), o);
    ParallelContext ctx = ParallelContext::single();
    for (int step = 0; step < 3; ++step) {
      for (int m = 0; m < 2; ++m) {
        Tensor x = tokens(2, 8, step * 2 + m), y = tokens(2, 8, step * 2 + m + 7);
        reducer.prepare_backward(/*sync=*/m == 1);
        (a.loss(x, y) / 2.0).backward();
        (b.loss(x, y) / 2.0).backward();
      }
      reducer.finish();
      const double na = clip_global_grad_norm(zero.grad_pieces(), 0.5, ctx);
      zero.step();
      zero.zero_grad();
      const double nb = optim::clip_grad_norm(adamw.params(), 0.5);
      adamw.step();
      adamw.zero_grad();
      EXPECT_NEAR(na, nb, 1e-6 * nb);
    }
    auto pa = a.named_parameters(), pb = b.named_parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_LT(max_abs_diff(pa[i].second, pb[i].second), 1e-6) << pa[i].first;
  }
}

TEST(ReleasedStorage, RefusesReadsUntilReacquiredAndKeepsItsTensors) {
  Tensor flat = zeros({6});
  Tensor p = zeros({2, 3});
  p.set_requires_grad(true);
  Tensor view = flat.alias({2, 3}, {3, 1}, 0);
  p.set_data(view);
  EXPECT_EQ(p.storage(), flat.storage());
  EXPECT_TRUE(p.requires_grad());
  flat.storage()->release();
  try {
    (void)p.data_ptr();
    FAIL() << "a released storage handed out a pointer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was released"), std::string::npos) << e.what();
  }
  flat.storage()->reacquire();
  Tensor ones3 = ones({2, 3});
  copy_(view, ones3);
  EXPECT_EQ(sum(p.detach()).item(), 6.0);
  EXPECT_THROW(p.set_data(zeros({3, 2})), Error);
}
