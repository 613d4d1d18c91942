// Tensor-parallel pieces without processes: shard arithmetic and padding, every shard's init equals
// the slice of the single-process parameter, the tp=1 model equals models::GPT, the padded
// vocabulary loss, and shard dropout.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/models/gpt.h"

using namespace trireme;
using namespace trireme::parallel;

namespace {

models::GPTConfig tiny_config(bool tie = true) {
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 32, .tie_embeddings = tie};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace

TEST(ShardSpec, PaddingArithmetic) {
  ShardSpec s{.dim = 0, .size = 4, .rank = 0, .full_shape = {61, 32}, .pad = true};
  EXPECT_EQ(s.padded_length(), 64);
  EXPECT_EQ(s.shard_length(), 16);
  EXPECT_EQ(shard_shape(s), (Shape{16, 32}));
  int64_t real_total = 0;
  for (int r = 0; r < 4; ++r) {
    s.rank = r;
    VocabShard v = VocabShard::of(s);
    EXPECT_EQ(v.start, 16 * r);
    EXPECT_EQ(v.real, r < 3 ? 16 : 13);
    EXPECT_EQ(v.vocab_size, 61);
    real_total += v.real;
  }
  EXPECT_EQ(real_total, 61);
  // A shard that is all padding: 5 rows over 4 ranks of 2 -> rank 3 holds rows 6, 7.
  ShardSpec tiny{.dim = 0, .size = 4, .rank = 3, .full_shape = {5, 2}, .pad = true};
  EXPECT_EQ(VocabShard::of(tiny).real, 0);
  EXPECT_TRUE(shard_pieces(tiny).empty());
  // Without padding a size that does not divide is an error naming the spec.
  ShardSpec bad{.dim = 0, .size = 4, .rank = 0, .full_shape = {61, 32}};
  EXPECT_THROW(bad.shard_length(), Error);
}

TEST(ShardSpec, BlocksTakeEachBlocksSlice) {
  ShardSpec s{.dim = 0, .size = 2, .rank = 1, .full_shape = {12, 1}, .blocks = 3};
  auto pieces = shard_pieces(s);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].full, 2);
  EXPECT_EQ(pieces[1].full, 6);
  EXPECT_EQ(pieces[2].full, 10);
  Tensor full = reshape(arange(0.0, 12.0, 1.0), {12, 1});
  EXPECT_EQ(shard_of(full, s).to_vector<float>(), (std::vector<float>{2, 3, 6, 7, 10, 11}));
}

TEST(ShardSpec, UnshardInvertsShardOf) {
  for (bool pad : {false, true}) {
    Shape shape = pad ? Shape{7, 6} : Shape{8, 6};
    Tensor full = reshape(arange(0.0, double(shape[0] * shape[1]), 1.0), shape);
    for (int dim : {0, 1}) {
      if (pad && dim == 1) continue;
      std::vector<Tensor> shards;
      for (int r = 0; r < 2; ++r) {
        shards.push_back(shard_of(full, {.dim = dim, .size = 2, .rank = r, .full_shape = shape, .pad = pad}));
      }
      EXPECT_EQ(max_abs_diff(unshard(shards, {.dim = dim, .size = 2, .full_shape = shape, .pad = pad}), full), 0.0);
    }
  }
}

// Every rank's shard, built without communication, is exactly its slice of models::GPT's parameter.
TEST(GPTTensorParallel, ShardsAreSlicesOfTheSingleProcessInit) {
  for (bool tie : {true, false}) {
    models::GPT ref(tiny_config(tie), 1234);
    std::map<std::string, Tensor> full;
    for (auto& [n, t] : ref.named_parameters()) full[n] = t;
    for (int p : {2, 4}) {
      for (int r = 0; r < p; ++r) {
        models::GPT tp(tiny_config(tie), models::GPTPlacement{.tp = {nullptr, p, r}}, 1234);
        auto params = tp.named_parameters();
        ASSERT_EQ(params.size(), full.size());
        for (auto& [name, shard] : params) {
          ASSERT_TRUE(full.contains(name)) << name;
          auto it = tp.shard_specs().find(name);
          Tensor want = it == tp.shard_specs().end() ? full[name] : shard_of(full[name], it->second);
          EXPECT_EQ(max_abs_diff(shard, want), 0.0) << name << " tp " << p << " rank " << r;
        }
      }
    }
  }
}

TEST(GPTTensorParallel, DeclaresTheShardingOfEachParameter) {
  models::GPT tp(tiny_config(), models::GPTPlacement{.tp = {nullptr, 2, 0}}, 1);
  const auto& s = tp.shard_specs();
  EXPECT_EQ(s.at("transformer.wte.weight").dim, 0);
  EXPECT_TRUE(s.at("transformer.wte.weight").pad);
  EXPECT_EQ(s.at("transformer.h.0.attn.c_attn.weight").blocks, 3);
  EXPECT_EQ(s.at("transformer.h.0.attn.c_proj.weight").dim, 1);
  EXPECT_EQ(s.at("transformer.h.1.mlp.c_fc.bias").dim, 0);
  EXPECT_EQ(s.at("transformer.h.1.mlp.c_proj.weight").dim, 1);
  EXPECT_FALSE(s.contains("transformer.h.1.mlp.c_proj.bias"));  // replicated
  EXPECT_FALSE(s.contains("transformer.ln_f.weight"));
  EXPECT_FALSE(s.contains("transformer.wpe.weight"));
  EXPECT_EQ(tp.transformer->wte->weight.sizes(), (Shape{31, 32}));
  models::GPT odd_heads_ok(tiny_config(), models::GPTPlacement{.tp = {nullptr, 4, 3}}, 1);
  EXPECT_THROW(models::GPT(tiny_config(), models::GPTPlacement{.tp = {nullptr, 8, 0}}, 1), Error);  // 4 heads over 8
}

// Padding columns (however large) change neither the loss nor get any gradient.
TEST(VocabParallelCrossEntropy, PaddingColumnsNeverCount) {
  const int64_t N = 6, V = 5;
  Generator gen(3);
  Tensor logits = randn({N, V}, gen);
  Tensor targets = from_vector<int64_t>({0, 4, 2, -100, 1, 3}, {N});
  Tensor padded = cat({logits, full({N, 3}, 50.0)}, 1).detach().set_requires_grad(true);
  Tensor ref_in = logits.detach().set_requires_grad(true);
  Tensor ref = cross_entropy(ref_in, targets);
  Tensor got = vocab_parallel_cross_entropy(padded, targets, {.start = 0, .real = V, .vocab_size = V}, TpGroup::single());
  EXPECT_NEAR(got.item(), ref.item(), 1e-6);
  ref.backward();
  got.backward();
  EXPECT_LT(max_abs_diff(narrow(padded.grad(), 1, 0, V), ref_in.grad()), 1e-6);
  EXPECT_EQ(max_abs_diff(narrow(padded.grad(), 1, V, 3), zeros({N, 3})), 0.0);
  Tensor all_ignored = from_vector<int64_t>({-100, -100}, {2});
  EXPECT_EQ(vocab_parallel_cross_entropy(zeros({2, 5}), all_ignored, {.start = 0, .real = 5, .vocab_size = 5},
                                         TpGroup::single()).item(), 0.0);
  EXPECT_THROW(vocab_parallel_cross_entropy(zeros({1, 5}), from_vector<int64_t>({5}, {1}),
                                            {.start = 0, .real = 5, .vocab_size = 5}, TpGroup::single()),
               Error);
}

// A shard's dropout draws exactly its columns of the full tensor's mask.
TEST(TpDropout, ShardMaskIsTheSliceOfTheFullMask) {
  Tensor x = ones({3, 4, 12});
  Tensor full_out = dropout(x, 0.3, true, 42, 9, 100);
  for (int r = 0; r < 3; ++r) {
    Tensor part = tp_dropout(contiguous(narrow(x, 2, 4 * r, 4)), 0.3, true, 42, 9, 12, 4 * r, 100);
    EXPECT_EQ(max_abs_diff(part, narrow(full_out, 2, 4 * r, 4)), 0.0) << r;
  }
  EXPECT_EQ(max_abs_diff(tp_dropout(x, 0.3, true, 42, 9, 12, 0, 100), full_out), 0.0);
}
