// Measures the pipeline bubble on CPU processes: run under `trireme launch --nproc-per-node p`,
// every rank times its computations and its waits over some steps, and rank 0 prints one line
// with the measured idle fraction (1 - compute / step time, averaged over ranks; the median step) beside
// the ideal (p - 1) / (m + p - 1). bench/pipeline_bubble.sh runs the whole table.
//
//   build/trireme launch --nproc-per-node 4 -- build/bench/pipeline_bubble --micro-batches 8
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/parallel/pipeline_executor.h"

using namespace trireme;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  int m = 4, layers = 8, warmup = 2, iters = 9;
  int64_t d = 128, T = 64, B = 32, V = 128;
  std::string schedule = "1f1b";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--micro-batches") m = std::atoi(v.c_str());
    else if (k == "--layers") layers = std::atoi(v.c_str());
    else if (k == "--d") d = std::atoll(v.c_str());
    else if (k == "--seq") T = std::atoll(v.c_str());
    else if (k == "--batch") B = std::atoll(v.c_str());
    else if (k == "--schedule") schedule = v;
    else if (k == "--warmup") warmup = std::atoi(v.c_str());
    else if (k == "--iters") iters = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "pipeline_bubble: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  try {
    dist::DistEnv env = dist::dist_env_from_environment();
    auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 60s));
    auto world = std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size,
                                                          dist::GlooOptions{.timeout = 120s});
    const int p = env.world_size;
    parallel::ParallelContext ctx(world, {.pp = p, .micro_batches = m, .schedule = schedule});
    const models::GPTConfig cfg{.vocab_size = V, .block_size = T, .n_layer = layers, .n_head = 4, .d_model = d};
    auto stage = std::make_shared<models::GPT>(cfg, ctx, 1);
    parallel::PipelineExecutor pipe(stage, ctx);

    Tensor ids = Tensor::empty({B, T}, DType::i64), tgt = Tensor::empty({B, T}, DType::i64);
    for (int64_t i = 0; i < B * T; ++i) {
      ids.data<int64_t>()[i] = int64_t(rng_uniform(3, 0, uint64_t(i)) * double(V)) % V;
      tgt.data<int64_t>()[i] = int64_t(rng_uniform(3, 1, uint64_t(i)) * double(V)) % V;
    }
    // Each measured step: (compute, total, idle fraction) summed over ranks; the table reports the
    // median step, since this machine's other load makes some steps slow.
    std::vector<std::array<double, 3>> steps;
    for (int it = 0; it < warmup + iters; ++it) {
      stage->zero_grad();
      world->barrier()->wait();  // every step starts together
      pipe.step(ids, tgt);
      if (it < warmup) continue;
      const auto& st = pipe.last_stats();
      Tensor acc = Tensor::empty({3}, DType::f64);
      double* s = acc.data<double>();
      s[0] = st.compute / p, s[1] = st.total / p, s[2] = (1.0 - st.compute / st.total) / p;
      world->all_reduce(acc)->wait();
      steps.push_back({s[0], s[1], s[2]});
    }
    std::sort(steps.begin(), steps.end(), [](const auto& x, const auto& y) { return x[2] < y[2]; });
    const auto& med = steps[steps.size() / 2];
    if (env.rank == 0) {
      std::printf("p=%d m=%2d schedule=%s step_ms=%.1f compute_ms=%.1f measured_bubble=%.3f (min %.3f max %.3f) ideal=%.3f\n",
                  p, m, schedule.c_str(), 1e3 * med[1], 1e3 * med[0], med[2], steps.front()[2], steps.back()[2],
                  parallel::pipeline_bubble_fraction(p, m));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_bubble: %s\n", e.what());
    return 1;
  }
}
