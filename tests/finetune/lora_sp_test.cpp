// LoRA adapters on the sequence-parallel path against one process, tensor by tensor: a GPT (gpt2,
// and llama with grouped-query attention) with adapters on every block layer, random A and B,
// adapter and model dropout, split over tp = 2 Gloo processes with sequence parallelism (the
// parallel tests' worker, re-run as `test_finetune parallel-worker lora_sp`), gives the single
// process's loss and, gathered from the shards, the same gradient of every adapter, with the
// partial gradients (the column adapters' A, used on a rank's token rows only) summed in the
// backward and, deferred, after it (GPT::defer_grad_sums); the base weights get no gradient.
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
            .d_model = 32, .dropout = 0.1, .bias = false, .ffn = 48, .n_kv_head = 2, .qkv_bias = true};
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 32, .dropout = 0.1};
}

void lora_sp(const std::shared_ptr<dist::ProcessGroup>& world, int rank) {
  parallel::ParallelContext ctx(world, {.tp = world->size(), .sequence_parallel = true});
  const parallel::LoraOptions o{.rank = 4, .alpha = 8, .dropout = 0.2, .seed = 9};
  for (bool llama : {false, true}) {
    for (bool defer : {false, true}) {
      models::GPT ref(config(llama), 11), sp(config(llama), ctx, 11);
      ref.add_lora(o, {"all"});
      sp.add_lora(o, {"all"});
      sp.defer_grad_sums(defer);
      trireme::testing::load_random_adapters(ref, sp);
      ref.set_rng(3, 1);
      sp.set_rng(3, 1);
      std::vector<int64_t> ids, targets;
      for (int64_t i = 0; i < 32; ++i) ids.push_back((i * 7 + 3) % 61), targets.push_back((i * 5 + 1) % 61);
      const Tensor x = from_vector(ids, {4, 8}), y = from_vector(targets, {4, 8});
      // Dropout splits the rows only inside a GlobalRowScope (GPT::dropout_can_split_rows), as
      // the trainer runs every forward.
      Tensor lr = ref.loss(x, y), lt;
      {
        nn::GlobalRowScope rows(0);
        lt = sp.loss(x, y);
      }
      TRIREME_CHECK(std::abs(lr.item() - lt.item()) < 1e-5 * lr.item(), "rank ", rank, ": loss ", lt.item(),
                    " vs ", lr.item());
      lr.backward();
      lt.backward();
      if (defer) sp.sum_deferred_grads();
      std::map<std::string, Tensor> ref_grads;
      for (auto& [n, p] : ref.named_parameters()) ref_grads[n] = p.grad();
      int adapters = 0;
      for (auto& [n, p] : sp.named_parameters()) {
        if (!models::is_lora_name(n)) {
          TRIREME_CHECK(!p.grad().defined(), "rank ", rank, ": the frozen ", n, " got a gradient");
          continue;
        }
        ++adapters;
        auto spec = sp.shard_specs().find(n);
        const Tensor g = spec == sp.shard_specs().end()
                             ? p.grad()
                             : parallel::gather_shards(p.grad(), spec->second, ctx.tp_group());
        const double d = max_abs_diff(g, ref_grads.at(n));
        TRIREME_CHECK(d < 1e-5, "rank ", rank, ": the gradient of ", n, " differs by ", d,
                      defer ? " (sums deferred)" : " (summed in the backward)");
      }
      TRIREME_CHECK(adapters == 2 * 2 * (llama ? 5 : 4), "rank ", rank, ": ", adapters, " adapters");
      std::printf("rank %d: lora_sp %s%s ok (loss %g)\n", rank, llama ? "llama" : "gpt2", defer ? " deferred" : "",
                  lt.item());
    }
  }
}

const trireme::testing::GlooWorkerEntry worker_entry("lora_sp", lora_sp);

}  // namespace

TEST(LoraSequenceParallel, AdapterGradientsMatchOneProcess) {
  parallel::testing::expect_worker_ok(2, "lora_sp");
}
