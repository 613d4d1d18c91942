// Times one full training step (forward, backward, AdamW) of a GPT on the CPU or one GPU and
// prints one JSON line in the same shape as ../shared/peer/torch_gpt_bench.py, so the two sit
// side by side. --dtype bf16 stores the parameters (and so every activation) in bf16 with f32
// optimizer state: pure bf16 training. --dtype amp-bf16 keeps f32 parameters and runs the
// forward under bf16 autocast (amp/autocast.h): the peer's setup, the like-for-like comparison.
// MFU uses the peer's formula: tokens/s · (6·N + 12·L·d·T) / 989 TFLOP/s (H100/H200 dense bf16).
//
//   build/bench/gpt_train_step --model tiny --batch 8 --threads 1
//   build/bench/gpt_train_step --model tiny --batch 8 --threads 1 --mode static   (docs/STATIC_GRAPH.md)
//   build/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --mode static --cuda-graph 0
//     (static, replayed kernel by kernel instead of as CUDA graphs; --dropout P sets model.dropout;
//     --multi-tensor 0 keeps one AdamW call per parameter; --fold-gelu 0 keeps GELU and its
//     backward out of the GEMMs (graph/gemm_folds.h); --clip C clips the gradients' global norm
//     on the device as the trainer does: every update then waits for the norm and they all merge)
//   build/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --dtype f32
//   build/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --dtype amp-bf16
//   build/bench/gpt_train_step --model gpt-1.3b --batch 8 --device cuda --dtype bf16 --recompute full
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

#include "trireme/amp/autocast.h"
#include "trireme/core/allocator.h"
#include "trireme/cuda/device.h"
#include "trireme/graph/static_function.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/models/gpt.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/runtime/cpu_setup.h"

using namespace trireme;

namespace {

// Counts the matrix-product kernel calls this thread runs while alive.
class GemmCounter final : public ObservingKernelTape {
 public:
  explicit GemmCounter(int64_t& count) : count_(count) {}

 private:
  void observe(const KernelCallRecord& call) override {
    count_ += call.op == "matmul" || call.op == "matmul_add" || call.op == "matmul_row_sums";
  }
  int64_t& count_;
};

}  // namespace

int main(int argc, char** argv) {
  runtime::configure_cpu_runtime(argv);  // as a library user would: the CPU's kernels, passive waiting
  std::string model = "tiny";
  std::string mode = "eager";
  bool cuda_graph = true;  // --mode static on CUDA: replay as CUDA graphs (0: kernel by kernel)
  bool multi_tensor = true;  // --mode static: merge the AdamW updates (0: one call per parameter)
  bool fold_gelu = true;     // --mode static: GELU and its backward in the GEMMs' epilogues (0: apart)
  double clip = 0;           // --clip C: clip the global gradient norm to C on the device, as the trainer does
  double dropout = 0.0;
  std::string device_name = "cpu", dtype_name_arg = "f32", recompute = "none";
  int64_t batch = 8, threads = 0, warmup = 3, iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--model") model = argv[i + 1];
    else if (k == "--batch") batch = std::atoll(argv[i + 1]);
    else if (k == "--threads") threads = std::atoll(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoll(argv[i + 1]);
    else if (k == "--iters") iters = std::atoll(argv[i + 1]);
    else if (k == "--device") device_name = argv[i + 1];
    else if (k == "--dtype") dtype_name_arg = argv[i + 1];
    else if (k == "--recompute") recompute = argv[i + 1];
    else if (k == "--mode") mode = argv[i + 1];
    else if (k == "--cuda-graph") cuda_graph = std::string(argv[i + 1]) != "0";
    else if (k == "--multi-tensor") multi_tensor = std::string(argv[i + 1]) != "0";
    else if (k == "--fold-gelu") fold_gelu = std::string(argv[i + 1]) != "0";
    else if (k == "--clip") clip = std::atof(argv[i + 1]);
    else if (k == "--dropout") dropout = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "gpt_train_step: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  // The peer's shapes: vocab, d_model, layers, heads, seq.
  struct Shape5 { const char* name; int64_t V, d, L, h, T; };
  const Shape5 shapes[] = {{"tiny", 6144, 256, 4, 4, 128},
                           {"gpt2-124m", 50304, 768, 12, 12, 1024},
                           {"gpt-1.3b", 50304, 2048, 24, 16, 1024},
                           {"gpt-6.7b", 50304, 4096, 32, 32, 2048}};
  const Shape5* s = nullptr;
  for (const auto& c : shapes) if (model == c.name) s = &c;
  if (!s) {
    std::fprintf(stderr, "gpt_train_step: unknown model %s (tiny, gpt2-124m, gpt-1.3b, gpt-6.7b)\n", model.c_str());
    return 2;
  }
  if (recompute != "none" && recompute != "selective" && recompute != "full") {
    std::fprintf(stderr, "gpt_train_step: unknown recompute %s (none, selective, full)\n", recompute.c_str());
    return 2;
  }
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "gpt_train_step: unknown device %s (cpu, cuda)\n", device_name.c_str());
    return 2;
  }
  if (dtype_name_arg != "f32" && dtype_name_arg != "bf16" && dtype_name_arg != "amp-bf16") {
    std::fprintf(stderr, "gpt_train_step: unknown dtype %s (f32, bf16, amp-bf16)\n", dtype_name_arg.c_str());
    return 2;
  }
  if (mode != "eager" && mode != "static") {
    std::fprintf(stderr, "gpt_train_step: unknown mode %s (eager, static)\n", mode.c_str());
    return 2;
  }
  const bool on_gpu = device_name == "cuda";
  if (on_gpu && !cuda::is_available()) {
    std::fprintf(stderr, "gpt_train_step: --device cuda, but %s\n", cuda::unavailable_reason().c_str());
    return 2;
  }
  const Device device = on_gpu ? Device::cuda(0) : Device::cpu();
  if (threads > 0) {
    omp_set_num_threads(int(threads));
    openblas_set_num_threads(int(threads));
  }
  models::GPTConfig cfg{.vocab_size = s->V, .block_size = s->T, .n_layer = s->L, .n_head = s->h, .d_model = s->d,
                          .dropout = dropout};
  models::GPT gpt(cfg, 0);
  gpt.set_recompute(recompute == "full"        ? models::GPT::Recompute::full
                    : recompute == "selective" ? models::GPT::Recompute::selective
                                               : models::GPT::Recompute::none);
  if (dtype_name_arg == "bf16") gpt.to(DType::bf16);
  gpt.to(device);
  optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-4});
  Generator gen(0);
  std::vector<int64_t> ids(size_t(batch * s->T)), tgt(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t(rng_uniform(1, 0, i) * float(s->V)) % s->V;
    tgt[i] = int64_t(rng_uniform(1, 1, i) * float(s->V)) % s->V;
  }
  Tensor x = from_vector(ids, {batch, s->T}, device), y = from_vector(tgt, {batch, s->T}, device);
  // The GPU runs ahead of the host: wait for it at both ends of each timed step.
  auto sync = [&] {
    if (on_gpu) cuda::synchronize(0);
  };
  const bool autocast = dtype_name_arg == "amp-bf16";
  auto eager_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      amp::AutocastGuard guard(device.type, DType::bf16, autocast);
      loss = gpt.loss(in[0], in[1]);
    }
    loss.backward();
    if (clip > 0) {
      parallel::clip_global_grad_norm_on_device(parallel::grad_pieces(gpt.named_parameters(), {}), clip,
                                                parallel::ParallelContext::single());
    }
    opt.step();
    opt.zero_grad(true);
    return {loss.detach()};
  };
  // Static: the first call runs eagerly (the optimizer's state), the second traces, the rest replay.
  graph::StaticOptions static_options;
  static_options.cuda_graph = cuda_graph;
  static_options.multi_tensor_adamw = multi_tensor;
  static_options.fold_into_gemms = fold_gelu;
  graph::StaticFunction static_step(eager_step, static_options);
  int64_t calls = 0;
  auto step = [&] {
    if (mode == "static" && calls++ > 0) static_step({x, y});
    else eager_step({x, y});
  };
  if (mode == "static") warmup = std::max<int64_t>(warmup, 2);
  // The matrix products of one eager step (the first): with full recomputation, a GPT block's
  // replay runs three of its four (autograd/checkpoint.h), which this shows on any model.
  int64_t gemms = 0;
  {
    GemmCounter counter(gemms);
    step();
  }
  for (int64_t i = 1; i < warmup; ++i) step();
  sync();
  reset_peak_memory(device);
  // host: the time to queue a step (until step() returns); near the step's time, the host and
  // not the GPU sets the pace.
  std::vector<double> ts, hosts;
  for (int64_t i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    hosts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sync();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  std::sort(hosts.begin(), hosts.end());
  double t = ts[ts.size() / 2];
  const double tokens_per_s = double(batch * s->T) / t;
  const double flops_per_token = 6.0 * double(gpt.num_parameters()) + 12.0 * double(s->L * s->d * s->T);
  const double peak_mib = double(memory_stats(device).peak_bytes) / (1 << 20);
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const graph::CaptureSummary capture = static_step.last() ? static_step.last()->capture_summary() : graph::CaptureSummary{};
  int adamw_calls = 0;  // static: the replayed AdamW calls, one per parameter or merged (adamw_multi)
  if (static_step.last()) {
    for (const graph::Node& n : static_step.last()->graph().nodes) adamw_calls += n.op == "adamw" || n.op == "adamw_multi";
  }
  std::printf(
      "{\"impl\": \"trireme-%s\", \"mode\": \"%s\", \"model\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", \"recompute\": \"%s\", "
      "\"batch\": %lld, \"seq\": %lld, \"params\": %lld, \"step_ms\": %.3f, \"host_ms\": %.3f, \"tokens_per_s\": %.1f, \"mfu\": %.4f, \"threads\": %d, \"openblas_core\": \"%s\", "
      "\"gemms_per_step\": %lld, \"dropout\": %g, \"cuda_graphs\": %d, \"outside_calls\": %d, \"adamw_calls\": %d, \"graph_pool_MiB\": %.1f, \"peak_tensor_MiB\": %.1f, \"peak_mem_GiB\": %.3f, \"max_rss_MiB\": %.1f}\n",
      TRIREME_VERSION, mode.c_str(), s->name, device_name.c_str(), dtype_name_arg.c_str(), recompute.c_str(), (long long)batch,
      (long long)s->T,
      (long long)gpt.num_parameters(), t * 1e3, hosts[hosts.size() / 2] * 1e3, tokens_per_s, tokens_per_s * flops_per_token / 989e12,
      omp_get_max_threads(), openblas_get_corename(), (long long)gemms, dropout, capture.graphs, capture.outside_calls, adamw_calls,
      double(capture.pool_bytes) / (1 << 20), peak_mib, peak_mib / 1024.0, double(ru.ru_maxrss) / 1024.0);
  return 0;
}
