// Times one full training step (forward, backward, AdamW) of a GPT on the CPU and prints one
// JSON line in the same shape as ../shared/peer/torch_gpt_bench.py, so the two sit side by side.
//
//   build/bench/gpt_train_step --model tiny --batch 8 --threads 1
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cblas.h>
#include <omp.h>

#include "trireme/core/allocator.h"
#include "trireme/models/gpt.h"
#include "trireme/optim/adamw.h"

using namespace trireme;

int main(int argc, char** argv) {
  std::string model = "tiny";
  int64_t batch = 8, threads = 0, warmup = 3, iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--model") model = argv[i + 1];
    else if (k == "--batch") batch = std::atoll(argv[i + 1]);
    else if (k == "--threads") threads = std::atoll(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoll(argv[i + 1]);
    else if (k == "--iters") iters = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "gpt_train_step: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  // The peer's shapes: vocab, d_model, layers, heads, seq.
  struct Shape5 { const char* name; int64_t V, d, L, h, T; };
  const Shape5 shapes[] = {{"tiny", 6144, 256, 4, 4, 128}, {"gpt2-124m", 50304, 768, 12, 12, 1024}};
  const Shape5* s = nullptr;
  for (const auto& c : shapes) if (model == c.name) s = &c;
  if (!s) {
    std::fprintf(stderr, "gpt_train_step: unknown model %s (tiny, gpt2-124m)\n", model.c_str());
    return 2;
  }
  if (threads > 0) {
    omp_set_num_threads(int(threads));
    openblas_set_num_threads(int(threads));
  }
  models::GPTConfig cfg{.vocab_size = s->V, .block_size = s->T, .n_layer = s->L, .n_head = s->h, .d_model = s->d};
  models::GPT gpt(cfg, 0);
  optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-4});
  Generator gen(0);
  std::vector<int64_t> ids(size_t(batch * s->T)), tgt(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t(rng_uniform(1, 0, i) * float(s->V)) % s->V;
    tgt[i] = int64_t(rng_uniform(1, 1, i) * float(s->V)) % s->V;
  }
  Tensor x = from_vector(ids, {batch, s->T}), y = from_vector(tgt, {batch, s->T});
  auto step = [&] {
    Tensor loss = gpt.loss(x, y);
    loss.backward();
    opt.step();
    opt.zero_grad(true);
  };
  for (int64_t i = 0; i < warmup; ++i) step();
  reset_peak_memory(Device::cpu());
  std::vector<double> ts;
  for (int64_t i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  double t = ts[ts.size() / 2];
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"impl\": \"trireme-%s\", \"model\": \"%s\", \"device\": \"cpu\", \"batch\": %lld, \"seq\": %lld, "
      "\"params\": %lld, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"threads\": %d, "
      "\"peak_tensor_MiB\": %.1f, \"max_rss_MiB\": %.1f}\n",
      TRIREME_VERSION, s->name, (long long)batch, (long long)s->T, (long long)gpt.num_parameters(), t * 1e3,
      double(batch * s->T) / t, omp_get_max_threads(), double(memory_stats(Device::cpu()).peak_bytes) / (1 << 20),
      double(ru.ru_maxrss) / 1024.0);
  return 0;
}
