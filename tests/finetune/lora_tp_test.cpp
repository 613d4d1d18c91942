// LoRA adapters split over tensor parallelism against one process, tensor by tensor: a GPT (gpt2,
// and llama with grouped-query attention) with adapters on every block layer, random A and B and
// adapter dropout, split over tp = 2 Gloo processes (the parallel tests' worker, re-run as
// `test_finetune parallel-worker lora_tp`), gives the single process's loss and, gathered from
// the shards, the same gradient of every adapter (column-parallel: A replicated, B split by rows;
// row-parallel: A split by columns, B replicated); the base weights get no gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "dist/parallel_worker.h"
#include "lora_worker.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/parallel/shard.h"

using namespace trireme;
using trireme::testing::max_abs_diff;

namespace {

models::GPTConfig config(bool llama) {
  if (llama)
    return {.arch = models::GPTArch::llama, .vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4,
            .d_model = 32, .bias = false, .ffn = 48, .n_kv_head = 2, .qkv_bias = true};
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 32};
}

void lora_tp(const std::shared_ptr<dist::ProcessGroup>& world, int rank) {
  parallel::ParallelContext ctx(world, {.tp = world->size()});
  const parallel::LoraOptions o{.rank = 4, .alpha = 8, .dropout = 0.2, .seed = 9};
  for (bool llama : {false, true}) {
    models::GPT ref(config(llama), 11), tp(config(llama), ctx, 11);
    ref.add_lora(o, {"all"});
    tp.add_lora(o, {"all"});
    trireme::testing::load_random_adapters(ref, tp);
    ref.set_rng(3, 1);
    tp.set_rng(3, 1);
    std::vector<int64_t> ids, targets;
    for (int64_t i = 0; i < 32; ++i) ids.push_back((i * 7 + 3) % 61), targets.push_back((i * 5 + 1) % 61);
    const Tensor x = from_vector(ids, {4, 8}), y = from_vector(targets, {4, 8});
    Tensor lr = ref.loss(x, y), lt = tp.loss(x, y);
    TRIREME_CHECK(std::abs(lr.item() - lt.item()) < 1e-5 * lr.item(), "rank ", rank, ": loss ", lt.item(), " vs ",
                  lr.item());
    lr.backward();
    lt.backward();
    std::map<std::string, Tensor> ref_grads;
    for (auto& [n, p] : ref.named_parameters()) ref_grads[n] = p.grad();
    int adapters = 0;
    for (auto& [n, p] : tp.named_parameters()) {
      if (!models::is_lora_name(n)) {
        TRIREME_CHECK(!p.grad().defined(), "rank ", rank, ": the frozen ", n, " got a gradient");
        continue;
      }
      ++adapters;
      auto spec = tp.shard_specs().find(n);
      const Tensor g = spec == tp.shard_specs().end() ? p.grad()
                                                       : parallel::gather_shards(p.grad(), spec->second, ctx.tp_group());
      const double d = max_abs_diff(g, ref_grads.at(n));
      TRIREME_CHECK(d < 1e-5, "rank ", rank, ": the gradient of ", n, " differs by ", d);
    }
    TRIREME_CHECK(adapters == 2 * 2 * (llama ? 5 : 4), "rank ", rank, ": ", adapters, " adapters");
    std::printf("rank %d: lora_tp %s ok (loss %g)\n", rank, llama ? "llama" : "gpt2", lt.item());
  }
}

const trireme::testing::GlooWorkerEntry worker_entry("lora_tp", lora_tp);

}  // namespace

TEST(LoraTensorParallel, AdapterGradientsMatchOneProcess) {
  parallel::testing::expect_worker_ok(2, "lora_tp");
}
