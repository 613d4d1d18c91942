// Measures how much of data-parallel gradient reduction the Reducer hides behind the backward pass
// (CPU, Gloo): trains a GPT for some steps with overlapped buckets, then with one bucket (which
// can only start when the last gradient is ready: no overlap), and prints one JSON line per mode
// from rank 0 with the reduction time, the part hidden behind backward and the step time.
//
//   trireme launch --nproc-per-node 2 -- build/bench/dp_overlap --d 256 --layers 4 --T 64 --batch 4
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/data_parallel.h"

using namespace trireme;

int main(int argc, char** argv) {
  int64_t d = 256, layers = 4, T = 64, batch = 4, vocab = 6144, steps = 8, bucket_kb = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int64_t v = std::atoll(argv[i + 1]);
    if (k == "--d") d = v;
    else if (k == "--layers") layers = v;
    else if (k == "--T") T = v;
    else if (k == "--batch") batch = v;
    else if (k == "--vocab") vocab = v;
    else if (k == "--steps") steps = v;
    else if (k == "--bucket-kb") bucket_kb = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  dist::DistEnv env = dist::dist_env_from_environment();
  auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env));
  auto world = std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size);
  models::GPTConfig cfg{.vocab_size = vocab, .block_size = T, .n_layer = layers, .n_head = 4, .d_model = d};

  for (const char* mode : {"overlapped", "one_bucket"}) {
    models::GPT model(cfg, 1);
    const int64_t bucket_bytes = std::string(mode) == "overlapped" ? bucket_kb << 10 : int64_t(1) << 40;
    parallel::Reducer reducer(model.named_parameters(), world.get(), {.bucket_bytes = bucket_bytes});
    optim::AdamW opt(model.named_parameters(), {.lr = 1e-4});
    Generator gen(uint64_t(100 + env.rank));
    double backward_s = 0, step_s = 0;
    for (int64_t s = 0; s < steps + 1; ++s) {
      Tensor x = to_dtype(mul(rand({batch, T}, gen), double(vocab - 1)), DType::i64);
      if (s == 1) reducer.reset_stats();  // step 0 is warm-up
      world->barrier()->wait();
      auto t0 = std::chrono::steady_clock::now();
      reducer.prepare_backward();
      model.loss(x, x).backward();
      auto t1 = std::chrono::steady_clock::now();
      reducer.finish();
      opt.step();
      opt.zero_grad();
      auto t2 = std::chrono::steady_clock::now();
      if (s > 0) {
        backward_s += std::chrono::duration<double>(t1 - t0).count();
        step_s += std::chrono::duration<double>(t2 - t0).count();
      }
    }
    const auto& st = reducer.stats();
    if (env.rank == 0) {
      std::printf("{\"bench\": \"dp_overlap\", \"mode\": \"%s\", \"ranks\": %d, \"buckets\": %zu, \"steps\": %lld, "
                  "\"params\": %lld, \"fwd_bwd_ms\": %.2f, \"step_ms\": %.2f, \"reduce_ms\": %.2f, "
                  "\"hidden_ms\": %.2f, \"exposed_ms\": %.2f, \"hidden_fraction\": %.3f}\n",
                  mode, env.world_size, reducer.buckets().size(), (long long)steps,
                  (long long)model.num_parameters(), 1e3 * backward_s / double(steps), 1e3 * step_s / double(steps),
                  1e3 * st.comm_seconds / double(st.reductions), 1e3 * st.hidden_seconds / double(st.reductions),
                  1e3 * st.exposed_seconds / double(st.reductions), st.hidden_fraction());
      std::fflush(stdout);
    }
  }
  return 0;
}
