// Pipeline partitions and the GPT's stages without processes: balanced sizes, stage slices that
// hold the single-process parameters (same names, same initial values), chained stages that
// compute the whole model's logits, one-stage execution with micro-batches that reproduces the
// whole batch's loss and gradients.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "trireme/autograd/engine.h"
#include "trireme/core/error.h"
#include "trireme/core/rng.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/parallel/pipeline_executor.h"
#include "trireme/parallel/pipeline_partition.h"

using namespace trireme;
using namespace trireme::parallel;

namespace {

models::GPTConfig tiny(int64_t layers = 4) {
  return {.vocab_size = 61, .block_size = 8, .n_layer = layers, .n_head = 4, .d_model = 32};
}

Tensor tokens(int64_t B, int64_t T, uint64_t stream) {
  Tensor t = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) t.data<int64_t>()[i] = int64_t(rng_uniform(7, stream, uint64_t(i)) * 61) % 61;
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(to_dtype(a.detach(), DType::f64), to_dtype(b.detach(), DType::f64)))).item();
}

}  // namespace

TEST(PipelinePartition, BalancedGivesExtrasToEarlyStages) {
  EXPECT_EQ(pipeline_partition_sizes(5, 3), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(pipeline_partition_sizes(4, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(pipeline_partition_sizes(12, 5), (std::vector<int>{3, 3, 2, 2, 2}));
  auto r = pipeline_partition(5, 3);
  EXPECT_EQ(r[0], (StageLayers{0, 2}));
  EXPECT_EQ(r[1], (StageLayers{2, 4}));
  EXPECT_EQ(r[2], (StageLayers{4, 5}));
  for (int L = 1; L <= 20; ++L)
    for (int p = 1; p <= L; ++p) {
      auto sizes = pipeline_partition_sizes(L, p);
      int total = 0;
      for (int s : sizes) {
        total += s;
        EXPECT_LE(sizes.front() - s, 1);
      }
      EXPECT_EQ(total, L);
    }
  auto given = pipeline_partition(8, 2, {3, 5});
  EXPECT_EQ(given[1], (StageLayers{3, 8}));
  EXPECT_THROW(pipeline_partition(8, 2, {3, 4}), Error);
  EXPECT_THROW(pipeline_partition(8, 2, {0, 8}), Error);
  EXPECT_THROW(pipeline_partition(8, 3, {3, 5}), Error);
  EXPECT_THROW(pipeline_partition_sizes(2, 3), Error);
}

TEST(GPTPipelineStages, SlicesHoldTheSingleProcessParameters) {
  for (auto [layers, p, v] : {std::tuple{4, 2, 1}, std::tuple{4, 4, 1}, std::tuple{5, 3, 1}, std::tuple{4, 2, 2}}) {
    models::GPT gpt(tiny(layers), 5);
    std::map<std::string, Tensor> whole;
    for (auto& [n, t] : gpt.named_parameters()) whole[n] = t;
    std::set<std::string> seen;
    for (int r = 0; r < p; ++r) {
      models::GPT stage(tiny(layers), models::GPTPlacement{.pipeline = {.stages = p, .rank = r, .virtual_stages = v}}, 5);
      for (auto& [n, t] : stage.named_parameters()) {
        ASSERT_TRUE(whole.count(n)) << n;
        EXPECT_EQ(max_abs_diff(whole[n], t), 0.0) << n << " on rank " << r;
        EXPECT_TRUE(seen.insert(n).second || n == "transformer.wte.weight") << n << " held twice";
      }
      EXPECT_EQ(stage.tied_weight().defined(), r == 0 || r == p - 1) << r;
    }
    EXPECT_EQ(seen.size(), whole.size());
  }
  // 5 layers over 3 stages: h.0-1, h.2-3, h.4 with ln_f and the tied head.
  models::GPT last(tiny(5), models::GPTPlacement{.pipeline = {.stages = 3, .rank = 2}}, 5);
  std::vector<std::string> names;
  for (auto& [n, t] : last.named_parameters()) names.push_back(n);
  EXPECT_EQ(names.front(), "transformer.wte.weight");
  EXPECT_EQ(names[1], "transformer.h.4.ln_1.weight");
  EXPECT_EQ(names.back(), "transformer.ln_f.bias");
}

TEST(GPTPipelineStages, TensorParallelStagesHoldSlicesOfTheSingleProcessParameters) {
  // tp 2 x pp 2 without processes (construction needs no communication): every shard is its
  // slice of models::GPT's parameter, and the slices of both tp ranks cover it.
  for (bool tie : {true, false}) {
    models::GPTConfig cfg = tiny();
    cfg.tie_embeddings = tie;
    models::GPT gpt(cfg, 5);
    std::map<std::string, Tensor> whole;
    for (auto& [n, t] : gpt.named_parameters()) whole[n] = t;
    std::set<std::string> seen;
    for (int pp = 0; pp < 2; ++pp) {
      std::map<std::string, std::vector<Tensor>> shards;
      std::map<std::string, ShardSpec> specs;
      for (int r = 0; r < 2; ++r) {
        models::GPT stage(cfg, models::GPTPlacement{.tp = {nullptr, 2, r}, .pipeline = {.stages = 2, .rank = pp}}, 5);
        EXPECT_FALSE(stage.shard_specs().empty());
        EXPECT_EQ(stage.tied_weight().defined(), tie) << pp;
        for (auto& [n, t] : stage.named_parameters()) {
          ASSERT_TRUE(whole.count(n)) << n;
          seen.insert(n);
          auto it = stage.shard_specs().find(n);
          if (it == stage.shard_specs().end()) {
            EXPECT_EQ(max_abs_diff(whole[n], t), 0.0) << n;
          } else {
            shards[n].push_back(t.detach());
            specs[n] = it->second;
          }
        }
      }
      for (auto& [n, parts] : shards) EXPECT_EQ(max_abs_diff(unshard(parts, specs[n]), whole[n]), 0.0) << n;
    }
    EXPECT_EQ(seen.size(), whole.size());
  }
}

TEST(GPTPipelineStages, ChainedStagesComputeTheGPTLogits) {
  models::GPT gpt(tiny(5), 3);
  Tensor ids = tokens(2, 8, 1);
  Tensor x = ids;
  for (int r = 0; r < 3; ++r) {
    models::GPT stage(tiny(5), models::GPTPlacement{.pipeline = {.stages = 3, .rank = r}}, 3);
    x = stage.forward_chunk(0, x);
  }
  EXPECT_LE(max_abs_diff(gpt.forward(ids), x), 1e-6);
}

TEST(PipelineExecutor, OneStageWithMicroBatchesMatchesTheWholeBatch) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    models::GPT gpt(tiny(), 9);
    auto stage = std::make_shared<models::GPT>(tiny(), 9);
    PipelineExecutor pipe(stage, nullptr, {.micro_batches = 4, .schedule = kind});
    Tensor ids = tokens(8, 8, 2), tgt = tokens(8, 8, 3);
    Tensor loss = gpt.loss(ids, tgt);
    autograd::backward({loss});
    const double got = pipe.step(ids, tgt);
    EXPECT_NEAR(got, loss.item(), 1e-5 * loss.item());
    auto a = gpt.named_parameters(), b = stage->named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_LE(max_abs_diff(a[i].second.grad(), b[i].second.grad()), 1e-6) << a[i].first;
    EXPECT_GT(pipe.last_stats().compute, 0.0);
    const double norm = optim::grad_norm(gpt.parameters());
    EXPECT_NEAR(pipe.grad_norm(), norm, 1e-5 * norm);
  }
}
