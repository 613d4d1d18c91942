// LoRA under ZeRO-3 at the level of its parts, over dp = 2 Gloo processes (the parallel tests'
// worker, re-run as `test_finetune parallel-worker lora_zero3`): the Reducer holds the adapters
// alone, the blocks' frozen base weights are sharded too (their memory released on every rank
// until a block is gathered), and three AdamW steps of the adapters, each rank on its half of
// the batch with adapter dropout, end where one process ends: the same adapters (gathered from
// the shards) and the same base weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "dist/parallel_worker.h"
#include "lora_worker.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/zero.h"

using namespace trireme;
using trireme::testing::max_abs_diff;

namespace {

bool released(const Tensor& t) {
  try {
    (void)t.data_ptr();
    return false;
  } catch (const Error&) {
    return true;
  }
}

nn::NamedTensors trainable(const models::GPT& gpt) {
  nn::NamedTensors out;
  for (auto& [n, p] : gpt.named_parameters())
    if (p.requires_grad()) out.emplace_back(n, p);
  return out;
}

void lora_zero3(const std::shared_ptr<dist::ProcessGroup>& world, int rank) {
  parallel::ParallelContext ctx(world, {.dp = world->size()});
  const models::GPTConfig config{.vocab_size = 61, .block_size = 8, .n_layer = 3, .n_head = 4, .d_model = 32};
  const parallel::LoraOptions lora{.rank = 4, .alpha = 8, .dropout = 0.2, .seed = 9};
  const optim::AdamWOptions adamw{.lr = 1e-2, .weight_decay = 0.1};
  models::GPT ref(config, 11), mine(config, ctx, 11);
  ref.add_lora(lora, {"all"});
  mine.add_lora(lora, {"all"});
  std::map<std::string, Tensor> base;
  for (auto& [n, t] : ref.full_state_dict()) base[n] = clone(t.detach());

  const nn::NamedTensors params = trainable(mine);
  parallel::Reducer reducer(params, ctx.dp_group(),
                            {.bucket_bytes = 4 << 10, .zero = 3, .units = models::block_parameter_indices(mine, params)});
  for (const auto& [n, p] : reducer.params()) TRIREME_CHECK(models::is_lora_name(n), "the Reducer holds the frozen ", n);
  auto sharded = models::shard_blocks(mine, reducer);
  int frozen = 0;
  for (const auto& block : mine.blocks()) {
    for (const auto& [n, p] : block->named_parameters()) {
      TRIREME_CHECK(released(p), "rank ", rank, ": block parameter ", n, " is whole outside its block's forward");
      frozen += !p.requires_grad();
    }
  }
  TRIREME_CHECK(frozen == 3 * 12, "rank ", rank, ": ", frozen, " frozen block parameters");
  parallel::ZeroOptimizer opt(reducer, adamw, sharded.get());
  optim::AdamW ref_opt(trainable(ref), adamw);

  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> ids, targets;
    for (int64_t i = 0; i < 32; ++i) ids.push_back((i * 7 + 3 * step) % 61), targets.push_back((i * 5 + step) % 61);
    const Tensor x = from_vector(ids, {4, 8}), y = from_vector(targets, {4, 8});
    ref.set_rng(3, uint64_t(step));
    mine.set_rng(3, uint64_t(step));
    ref.loss(x, y).backward();
    ref_opt.step();
    ref_opt.zero_grad();
    reducer.prepare_backward();
    {
      nn::GlobalRowScope rows(2 * rank);  // this rank's half of the batch
      mine.loss(contiguous(narrow(x, 0, 2 * rank, 2)), contiguous(narrow(y, 0, 2 * rank, 2))).backward();
    }
    reducer.finish();
    opt.step();
    opt.zero_grad();
  }
  sharded->gather_all();
  std::map<std::string, Tensor> want;
  for (auto& [n, p] : ref.named_parameters()) want[n] = p;
  for (auto& [n, p] : mine.named_parameters()) {
    const double d = max_abs_diff(p, want.at(n));
    if (models::is_lora_name(n)) {
      TRIREME_CHECK(d < 1e-5, "rank ", rank, ": adapter ", n, " differs from one process's by ", d);
    } else {
      TRIREME_CHECK(max_abs_diff(p, base.at(n)) == 0, "rank ", rank, ": the frozen ", n, " changed");
    }
  }
  sharded->release_all();
  std::printf("rank %d: lora_zero3 ok\n", rank);
}

const trireme::testing::GlooWorkerEntry worker_entry("lora_zero3", lora_zero3);

}  // namespace

TEST(LoraZeroThree, FrozenWeightsShardedAndAdaptersMatchOneProcess) {
  parallel::testing::expect_worker_ok(2, "lora_zero3");
}
