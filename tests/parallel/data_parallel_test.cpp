// Data-parallel pieces without processes: bucket assignment, the Reducer's gradient buckets and
// micro-batch accumulation, ZeRO-1 on one rank equal to AdamW, its shard-naming state, and the
// global norm of one process.
#include <gtest/gtest.h>

#include "gpt_test_data.h"

#include <cmath>

#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/parallel/zero.h"

using namespace trireme;
using namespace trireme::parallel;
using trireme::parallel::testing::max_abs_diff;
using trireme::parallel::testing::tokens;

namespace {

models::GPTConfig tiny_config() {
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 32};
}

}  // namespace

TEST(AssignBuckets, ReverseOrderCutByBytes) {
  // Four f32 parameters of 10, 20, 30, 40 elements; 100-byte buckets hold 25 floats.
  auto b = assign_buckets({{10, DType::f32}, {20, DType::f32}, {30, DType::f32}, {40, DType::f32}}, 100);
  ASSERT_EQ(b.size(), 4u);  // 40 and 30 exceed a bucket alone; 20 + 10 = 30 floats > 25
  EXPECT_EQ(b[0].slots[0].param, 3u);
  EXPECT_EQ(b[1].slots[0].param, 2u);
  EXPECT_EQ(b[2].slots[0].param, 1u);
  EXPECT_EQ(b[3].slots[0].param, 0u);
  auto big = assign_buckets({{10, DType::f32}, {20, DType::f32}, {30, DType::f32}, {40, DType::f32}}, 396);
  ASSERT_EQ(big.size(), 2u);  // 40 + 30 + 20 = 90 floats; 10 more would make 400 bytes > 396
  EXPECT_EQ(big[0].slots.size(), 3u);
  EXPECT_EQ(big[0].slots[1].offset, 40);
  EXPECT_EQ(big[0].slots[2].offset, 70);
  EXPECT_EQ(big[0].numel, 90);
  EXPECT_EQ(big[1].numel, 10);
}

TEST(AssignBuckets, DtypesSplitAndZeroPads) {
  auto b = assign_buckets({{3, DType::f32}, {5, DType::bf16}, {7, DType::bf16}}, 1 << 20, /*pad_to=*/4);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].dtype, DType::bf16);
  EXPECT_EQ(b[0].numel, 12);  // 7 + 5
  EXPECT_EQ(b[1].dtype, DType::f32);
  EXPECT_EQ(b[1].numel, 4);   // 3 padded to 4
  EXPECT_THROW(assign_buckets({{3, DType::f32}}, 0), Error);
}

// Gradients land in the buckets (p.grad() is a view of one), and two micro-batches with sync only
// on the last accumulate to the gradient of both together.
TEST(Reducer, AccumulatesMicroBatchesIntoBuckets) {
  models::GPT a(tiny_config(), 3), b(tiny_config(), 3);
  Reducer reducer(a.named_parameters(), nullptr, {.bucket_bytes = 8 << 10});
  EXPECT_GT(reducer.buckets().size(), 3u);
  Tensor x = tokens(4, 8, 1), y = tokens(4, 8, 2);
  for (int m = 0; m < 2; ++m) {
    reducer.prepare_backward(m == 1);
    (a.loss(narrow(x, 0, 2 * m, 2), narrow(y, 0, 2 * m, 2)) * 0.5).backward();
  }
  reducer.finish();
  b.loss(x, y).backward();
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT(max_abs_diff(pa[i].second.grad(), pb[i].second.grad()), 1e-6) << pa[i].first;
  }
  // The last parameter (first to get its gradient) sits at the start of bucket 0.
  const BucketSlot& first = reducer.buckets()[0].slots[0];
  EXPECT_EQ(first.param, pa.size() - 1);
  EXPECT_EQ(reducer.stats().reductions, 1);
}

// ZeRO-1 over one rank is AdamW: same parameters after a few clipped steps.
TEST(ZeroOptimizer, OneRankEqualsAdamW) {
  const optim::AdamWOptions o{.lr = 1e-2, .weight_decay = 0.1};
  models::GPT a(tiny_config(), 5), b(tiny_config(), 5);
  Reducer reducer(a.named_parameters(), nullptr, {.bucket_bytes = 4 << 10, .zero = 1});
  ZeroOptimizer zero(reducer, o);
  optim::AdamW adamw(b.named_parameters(), o);
  ParallelContext ctx = ParallelContext::single();
  for (int step = 0; step < 3; ++step) {
    Tensor x = tokens(2, 8, step), y = tokens(2, 8, step + 7);
    reducer.prepare_backward();
    a.loss(x, y).backward();
    reducer.finish();
    double na = clip_global_grad_norm(zero.grad_pieces(), 0.5, ctx);
    zero.step();
    zero.zero_grad();
    b.loss(x, y).backward();
    double nb = optim::clip_grad_norm(adamw.params(), 0.5);
    adamw.step();
    adamw.zero_grad();
    EXPECT_NEAR(na, nb, 1e-6 * nb);
  }
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LT(max_abs_diff(pa[i].second, pb[i].second), 1e-6) << pa[i].first;
  }
  EXPECT_EQ(zero.shard_numel(), a.num_parameters());
}

TEST(ZeroOptimizer, StateNamesRankAndShard) {
  models::GPT a(tiny_config(), 5);
  Reducer reducer(a.named_parameters(), nullptr, {.zero = 1});
  ZeroOptimizer zero(reducer, {});
  reducer.prepare_backward();
  a.loss(tokens(2, 8, 0), tokens(2, 8, 1)).backward();
  reducer.finish();
  zero.step();
  std::map<std::string, Tensor> state;
  for (auto& [k, v] : zero.state_dict()) state[k] = v;
  EXPECT_EQ(state.at("zero.dp_rank").item(), 0.0);
  EXPECT_EQ(state.at("zero.dp_size").item(), 1.0);
  EXPECT_TRUE(state.contains("state.transformer.wte.weight[0:1952].exp_avg"));
  zero.load_state_dict(state);
  state["zero.dp_rank"] = full({1}, 1.0, DType::i64);
  EXPECT_THROW(zero.load_state_dict(state), Error);
}

// Large and small gradients (sum_squares adds large ones in blocks): the norm and the clipped
// on-device norm are the f64 norm of every element.
TEST(GlobalGradNorm, LargeAndSmallGradientsGiveTheWholeNorm) {
  Generator gen(4);
  std::vector<GradPiece> pieces;
  double squares = 0;
  for (int64_t n : {3 * 65536 + 17, 2 * 65536, 4096 + 5, 100}) {
    Tensor g = rand({n}, gen, DType::f32);
    for (float v : g.to_vector<float>()) squares += double(v) * double(v);
    pieces.push_back({g, false, false, true});
  }
  const double want = std::sqrt(squares);
  EXPECT_NEAR(global_grad_norm(pieces, ParallelContext::single()), want, 1e-12 * want);
  const Tensor on_device = clip_global_grad_norm_on_device(pieces, 0.0, ParallelContext::single());
  EXPECT_NEAR(on_device.to_vector<double>()[0], want, 1e-12 * want);
}

TEST(GlobalGradNorm, OneProcessIsTheL2Norm) {
  models::GPT a(tiny_config(), 9);
  a.loss(tokens(2, 8, 0), tokens(2, 8, 1)).backward();
  auto pieces = grad_pieces(a.named_parameters(), {});
  EXPECT_NEAR(global_grad_norm(pieces, ParallelContext::single()), optim::grad_norm(a.parameters()), 1e-9);
}
