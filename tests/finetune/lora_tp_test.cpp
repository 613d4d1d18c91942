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
using namespace std::chrono_literals;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  TRIREME_CHECK(a.sizes() == b.sizes(), "shapes ", a.sizes(), " vs ", b.sizes());
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

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
    // Random adapters (B is zero at first), the same whole values in both.
    std::map<std::string, Tensor> full;
    uint64_t seed = 50;
    for (auto& [n, t] : ref.full_state_dict()) {
      full[n] = t.detach();
      if (models::is_lora_name(n)) {
        Tensor r = zeros(t.sizes());
        nn::init_normal(r, 0.3, seed++, n);
        full[n] = r;
      }
    }
    ref.load_full_state_dict(full);
    tp.load_full_state_dict(full);
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

int run_worker(const std::string& scenario) {
  int rank = 0;
  try {
    dist::DistEnv env = dist::dist_env_from_environment();
    rank = env.rank;
    auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 20s));
    auto world = std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size,
                                                          dist::GlooOptions{.timeout = 20s});
    TRIREME_CHECK(scenario == "lora_tp", "unknown scenario ", scenario);
    lora_tp(world, rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());  // the checks name the rank
    return 1;
  }
}

// Runs before GoogleTest's main when this binary was started as a worker.
struct WorkerEntry {
  WorkerEntry() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    if (args.size() >= 3 && args[1] == "parallel-worker" && args[2] == "lora_tp") {  // other files' scenarios pass
      const int rc = run_worker(args[2]);
      std::fflush(nullptr);
      std::_Exit(rc);
    }
  }
} worker_entry;

}  // namespace

TEST(LoraTensorParallel, AdapterGradientsMatchOneProcess) {
  parallel::testing::expect_worker_ok(2, "lora_tp");
}
