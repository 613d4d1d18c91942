// Times one training step (forward, backward, gradient averaging, AdamW) of a GPT laid out over
// data-parallel or tensor-parallel ranks, one GPU each, and prints one JSON line from rank 0:
// global tokens/s, step ms (median, every rank CUDA-synchronised), peak GiB of rank 0. The
// same binary with one process is the one-GPU baseline (no Reducer, no process group), so
// scaling efficiency = tokens/s(N) / (N x tokens/s(1)). Run under the launcher for N > 1:
//
//   build/bench/gpt_parallel_step --model gpt2-124m --batch 16 --device cuda --dtype bf16
//   trireme launch --nproc-per-node 2 -- build/bench/gpt_parallel_step --model gpt2-124m --dp 2
//       --batch 16 --device cuda --dtype bf16          (--batch is per data-parallel rank)
//   trireme launch --nproc-per-node 2 -- build/bench/gpt_parallel_step --model gpt-1.3b --tp 2
//       --batch 8 --device cuda --dtype bf16
//
// --tp-alone N (one process, no launcher): rank 0's shard of a tp=N model with every
// tensor-parallel collective skipped (a group that does nothing): the numbers are wrong, but the
// kernels and shapes are those of tp=N, so its step is tensor parallelism's compute without its
// communication, and it can be profiled in one process (ncu cannot replay NCCL kernels). Its
// MFU counts N GPUs, as the tp=N job's would.
//
// --mode static: the step traced once and replayed (train.mode = "static": the first step eager,
// the second traced, the rest replayed, on GPUs as CUDA graphs; docs/STATIC_GRAPH.md), the
// dp and tp collectives inside it. Not with --phases or --tp-alone.
//
// --peer-allreduce auto|off|on: which GPU groups use the copy-engine collectives (the trainer's
// parallel.peer_allreduce; Note [peer all-reduce]); off measures NCCL's.
//
// --dtype bf16 is pure bf16 (parameters and activations bf16, f32 AdamW state), as in
// bench/gpt_train_step. The shapes are ../shared/peer/torch_gpt_bench.py's; MFU there uses
// 6·N + 12·L·d·T flops per token over world_size x 989 TFLOP/s.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef TRIREME_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "trireme/core/allocator.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/stream.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/process_group_nccl.h"
#include "trireme/graph/static_function.h"
#include "trireme/ops/factory.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/zero.h"
#include "trireme/models/gpt.h"

using namespace trireme;

namespace {

struct ModelShape {
  const char* name;
  int64_t V, d, L, h, T;
};
constexpr ModelShape kShapes[] = {{"tiny", 6144, 256, 4, 4, 128},
                                  {"gpt2-124m", 50304, 768, 12, 12, 1024},
                                  {"gpt-1.3b", 50304, 2048, 24, 16, 1024}};

int usage(const std::string& why) {
  std::fprintf(stderr,
               "gpt_parallel_step: %s\n"
               "usage: gpt_parallel_step [--model tiny|gpt2-124m|gpt-1.3b] [--batch B (per dp rank)] [--dp N] "
               "[--tp N | --tp-alone N] [--device cpu|cuda] [--dtype f32|bf16] [--warmup 3] [--iters 10] "
               "[--bucket-mb 25] [--no-overlap 0|1] [--sp 0|1] [--phases 0] [--peer-allreduce auto|off|on] "
               "[--zero 0|1|2|3] [--mode eager|static]\n",
               why.c_str());
  return 2;
}

// Whole parameters: a tensor-parallel shard counts as its full (unpadded) shape.
int64_t full_parameter_count(models::GPT& gpt) {
  int64_t n = 0;
  for (const auto& [name, p] : gpt.named_parameters()) {
    auto it = gpt.shard_specs().find(name);
    if (it == gpt.shard_specs().end()) {
      n += p.numel();
      continue;
    }
    int64_t full = 1;
    for (int64_t s : it->second.full_shape) full *= s;
    n += full;
  }
  return n;
}

// The tensor-parallel group of --tp-alone: every collective returns at once and changes nothing.
class SkippedCollectives : public dist::ProcessGroup {
 public:
  explicit SkippedCollectives(int size) : ProcessGroup(0, size) {}
  std::string backend_name() const override { return "skipped"; }
  dist::WorkPtr all_reduce(const Tensor&, const dist::AllReduceOptions&) override { return done(); }
  dist::WorkPtr all_gather(const Tensor&, const Tensor&, const dist::AllGatherOptions&) override { return done(); }
  dist::WorkPtr reduce_scatter(const Tensor&, const Tensor&, const dist::ReduceScatterOptions&) override {
    return done();
  }

 private:
  struct Done : dist::Work {
    bool is_completed() override { return true; }
    void wait(dist::milliseconds) override {}
  };
  static dist::WorkPtr done() { return std::make_shared<Done>(); }
};

// Holds the current stream of a GPU back (a host function that waits for a flag) while the host
// queues work behind it, so the host's time to queue that work is measured alone: the GPU can
// neither pace the host nor be waited for. A queue that blocks the host (a host sync inside it,
// or a launch queue that fills) lets the gate go after its timeout (500 ms): that queue time then
// reads about 500 ms and counts in `timeouts` (gate_timeouts in the JSON).
class HostGate {
 public:
  void close(int device) {
#ifdef TRIREME_WITH_CUDA
    open_ = false;
    TRIREME_CHECK(cudaLaunchHostFunc(cuda::current_stream(device).handle(), &HostGate::hold, this) == cudaSuccess,
                  "HostGate: cudaLaunchHostFunc failed");
#else
    (void)device;
#endif
  }
  void open() { open_ = true; }
  int timeouts() const { return timeouts_; }

 private:
  static void hold(void* self) {
    auto* g = static_cast<HostGate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!g->open_.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        ++g->timeouts_;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::atomic<bool> open_{true};
  std::atomic<int> timeouts_{0};
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt2-124m", device_name = "cuda", dtype_arg = "bf16";
  int64_t batch = 16, warmup = 3, iters = 10, dp = 0, tp = 1, phases = 0, tp_alone = 0, zero = 0;
  double bucket_mb = 25;
  bool overlap = true;  // --no-overlap 1: every dp bucket launched after the backward pass
  bool sp = false;        // --sp 1: sequence parallelism (Note [sequence parallelism])
  bool defer_sums = true;  // --defer-sums 0: sum partial gradients in the backward (Note [deferred gradient sums])
  std::string peer_all_reduce = "auto", mode = "eager";
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return usage("flag " + k + " needs a value");
    const char* v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--batch") batch = std::atoll(v);
    else if (k == "--dp") dp = std::atoll(v);
    else if (k == "--tp") tp = std::atoll(v);
    else if (k == "--device") device_name = v;
    else if (k == "--dtype") dtype_arg = v;
    else if (k == "--warmup") warmup = std::atoll(v);
    else if (k == "--iters") iters = std::atoll(v);
    else if (k == "--bucket-mb") bucket_mb = std::atof(v);
    else if (k == "--no-overlap") overlap = std::atoi(v) == 0;
    else if (k == "--sp") sp = std::atoi(v) != 0;
    else if (k == "--defer-sums") defer_sums = std::atoi(v) != 0;
    else if (k == "--phases") phases = std::atoll(v);
    else if (k == "--tp-alone") tp_alone = std::atoll(v);
    else if (k == "--peer-allreduce") peer_all_reduce = v;
    else if (k == "--zero") zero = std::atoll(v);
    else if (k == "--mode") mode = v;
    else return usage("unknown flag " + k);
  }
  const ModelShape* s = nullptr;
  for (const auto& c : kShapes) {
    if (model == c.name) s = &c;
  }
  if (!s) return usage("unknown model " + model);
  if (device_name != "cpu" && device_name != "cuda") return usage("unknown device " + device_name);
  if (dtype_arg != "f32" && dtype_arg != "bf16") return usage("unknown dtype " + dtype_arg);
  if (batch < 1 || iters < 1 || warmup < 0 || tp < 1) return usage("batch, iters and tp must be positive");
  if (zero < 0 || zero > 3) return usage("--zero takes a ZeRO stage, 0 to 3");
  if (mode != "eager" && mode != "static") return usage("unknown mode " + mode + " (eager, static)");
  if (mode == "static" && (phases > 0 || tp_alone > 0)) return usage("--mode static times whole steps: not with --phases or --tp-alone");
  dist::PeerAllReduceMode peer_mode;
  try {
    peer_mode = dist::parse_peer_all_reduce_mode(peer_all_reduce);
  } catch (const Error& e) {
    return usage(std::string("--peer-allreduce: ") + e.what());
  }

  const dist::DistEnv env = dist::dist_env_from_environment();
  if (dp == 0) dp = env.world_size / tp;
  if (dp * tp != env.world_size) {
    return usage("dp x tp = " + std::to_string(dp * tp) + " but the job has " + std::to_string(env.world_size) +
                 " processes");
  }
  if (zero > 0 && dp < 2) return usage("--zero shards over data-parallel ranks: it needs --dp 2 or more");
  if (tp_alone != 0 && (tp_alone < 2 || tp != 1 || dp != 1 || env.world_size != 1)) {
    return usage("--tp-alone N needs N >= 2, one process and no --tp or --dp");
  }
  const bool on_gpu = device_name == "cuda";
  if (on_gpu && !cuda::is_available()) return usage("--device cuda, but " + cuda::unavailable_reason());
  // One GPU per process, current before anything (the communicator, the allocator) touches one.
  if (on_gpu) cuda::set_device(env.local_rank);
  const Device device = on_gpu ? Device::cuda(env.local_rank) : Device::cpu();

  const parallel::ParallelLayout layout{
      .dp = int(dp), .tp = int(tp), .bucket_bytes = int64_t(bucket_mb * (1 << 20)), .sequence_parallel = sp};
  std::shared_ptr<dist::ProcessGroup> world;
  std::unique_ptr<parallel::ParallelContext> ctx;
  if (env.world_size == 1) {
    ctx = std::make_unique<parallel::ParallelContext>(parallel::ParallelContext::single(layout));
  } else {
    auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, std::chrono::seconds(120)));
    world = dist::make_process_group(on_gpu ? "nccl" : "gloo", store, env.rank, env.world_size,
                                     {.timeout = std::chrono::seconds(300),
                                      .device = on_gpu ? env.local_rank : -1,
                                      .peer_all_reduce = peer_mode});
    ctx = std::make_unique<parallel::ParallelContext>(world, layout);
  }

  models::GPTConfig cfg{.vocab_size = s->V, .block_size = s->T, .n_layer = s->L, .n_head = s->h, .d_model = s->d};
  std::unique_ptr<SkippedCollectives> skipped;  // --tp-alone's group: outlives the model
  std::shared_ptr<models::GPT> gpt;
  if (tp_alone) {
    skipped = std::make_unique<SkippedCollectives>(int(tp_alone));
    gpt = std::make_shared<models::GPT>(
        cfg, models::GPTPlacement{.tp = {skipped.get(), int(tp_alone), 0}, .sequence_parallel = sp}, /*seed=*/0);
  } else {
    gpt = std::make_shared<models::GPT>(cfg, *ctx, /*seed=*/0);
  }
  gpt->defer_grad_sums(defer_sums && zero == 0);  // ZeRO shards the gradients as they arrive
  if (dtype_arg == "bf16") gpt->to(DType::bf16);
  gpt->to(device);
  // The one-GPU baseline and tensor parallelism alone have nothing to average: no Reducer, so
  // the baseline is the plain single-process step.
  // --zero N: the trainer's ZeRO stage (ZeRO-3's blocks gathered around their use).
  std::unique_ptr<parallel::Reducer> reducer;
  std::unique_ptr<parallel::FullyShardedParams> sharded;
  if (dp > 1) {
    reducer = std::make_unique<parallel::Reducer>(
        gpt->named_parameters(), ctx->dp_group(),
        parallel::ReducerOptions{.bucket_bytes = layout.bucket_bytes, .zero = int(zero),
                                 .units = zero == 3 ? models::block_parameter_indices(*gpt) : std::vector<std::vector<size_t>>{},
                                 .overlap = overlap});
  }
  if (zero == 3) sharded = models::shard_blocks(*gpt, *reducer);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (zero > 0) {
    optimizer = std::make_unique<parallel::ZeroOptimizer>(*reducer, optim::AdamWOptions{.lr = 1e-4}, sharded.get());
  } else {
    optimizer = std::make_unique<optim::AdamW>(gpt->named_parameters(), optim::AdamWOptions{.lr = 1e-4});
  }
  optim::Optimizer& opt = *optimizer;

  // Each data-parallel replica its own batch; the ranks of one tp group the same one.
  const uint64_t data_seed = 1 + uint64_t(ctx->dp_rank());
  std::vector<int64_t> ids(size_t(batch * s->T)), tgt(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int64_t(rng_uniform(data_seed, 0, i) * float(s->V)) % s->V;
    tgt[i] = int64_t(rng_uniform(data_seed, 1, i) * float(s->V)) % s->V;
  }
  const Tensor x = from_vector(ids, {batch, s->T}, device), y = from_vector(tgt, {batch, s->T}, device);

  auto sync = [&] {
    if (on_gpu) cuda::synchronize(env.local_rank);
  };
  auto eager_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    if (reducer) reducer->prepare_backward(true);
    Tensor loss = gpt->loss(in[0], in[1]);
    loss.backward();
    if (reducer) reducer->finish();
    gpt->sum_deferred_grads();
    opt.step();
    opt.zero_grad(true);
    return {loss.detach()};
  };
  // Static: the first call runs eagerly (the optimizer's state), the second traces, the rest replay.
  graph::StaticFunction static_step(eager_step);
  int64_t calls = 0;
  auto step = [&] {
    if (mode == "static" && calls++ > 0) static_step({x, y});
    else eager_step({x, y});
  };
  if (mode == "static") warmup = std::max<int64_t>(warmup, 2);
  for (int64_t i = 0; i < warmup; ++i) step();
  sync();
  reset_peak_memory(device);
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // host: how long the host takes to queue a step (the GPU runs behind it); when it is close to
  // the step time, the step is bound by the host, not the GPU.
  std::vector<double> ts, host;
  for (int64_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    step();
    const auto t1 = Clock::now();
    sync();
    ts.push_back(secs(t0, Clock::now()));
    host.push_back(secs(t0, t1));
  }
  std::sort(ts.begin(), ts.end());
  const double t = ts[ts.size() / 2];
  // The same number of steps back to back, synchronised once at the end: the step time when
  // the host never waits for the GPU between steps (the trainer reads the loss every step, so
  // step_ms is the figure that counts; the difference is what the host costs at a step's start).
  double unsynced = 0;
  {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) step();
    sync();
    unsynced = secs(t0, Clock::now()) / double(iters);
  }
  // --phases N: N more steps synchronised between forward, backward (with the dp reduction) and
  // the optimizer, to see which part does not scale.
  std::vector<double> fwd, bwd, upd;
  for (int64_t i = 0; i < phases; ++i) {
    if (reducer) reducer->prepare_backward(true);
    const auto t0 = Clock::now();
    Tensor loss = gpt->loss(x, y);
    sync();
    const auto t1 = Clock::now();
    loss.backward();
    if (reducer) reducer->finish();
    gpt->sum_deferred_grads();
    sync();
    const auto t2 = Clock::now();
    opt.step();
    opt.zero_grad(true);
    sync();
    fwd.push_back(secs(t0, t1));
    bwd.push_back(secs(t1, t2));
    upd.push_back(secs(t2, Clock::now()));
  }
  // On a GPU, N more steps with the stream held back by a HostGate: the host's time to queue the
  // forward, the backward and the optimizer step when nothing makes it wait (queue_*_ms). A
  // phase whose queue time is close to its time above is bound by the host, not the GPU.
  std::vector<double> qfwd, qbwd, qupd;
  HostGate gate;
  for (int64_t i = 0; on_gpu && i < phases; ++i) {
    if (reducer) reducer->prepare_backward(true);
    auto gated = [&](auto&& work) {
      gate.close(env.local_rank);
      const auto t0 = Clock::now();
      work();
      const auto t1 = Clock::now();
      gate.open();
      sync();
      return secs(t0, t1);
    };
    Tensor loss;
    qfwd.push_back(gated([&] { loss = gpt->loss(x, y); }));
    qbwd.push_back(gated([&] {
      loss.backward();
      if (reducer) reducer->finish();
      gpt->sum_deferred_grads();
    }));
    qupd.push_back(gated([&] {
      opt.step();
      opt.zero_grad(true);
    }));
  }
  const bool queued = !qfwd.empty();
  const int64_t n_params = full_parameter_count(*gpt);
  const double tokens_per_s = double(dp * batch * s->T) / t;
  const double flops_per_token = 6.0 * double(n_params) + 12.0 * double(s->L * s->d * s->T);
  const int64_t gpus = env.world_size * std::max<int64_t>(tp_alone, 1);  // --tp-alone stands for N GPUs
  const double peak_gib = double(memory_stats(device).peak_bytes) / double(1 << 30);
  double hidden = 0;
  if (reducer) hidden = reducer->stats().hidden_fraction();
  // Whether the group that carries this layout's collectives all-reduces through the copy
  // engines (Note [peer all-reduce]).
  const auto* comm_group = dynamic_cast<const dist::ProcessGroupNccl*>(tp > 1 ? ctx->tp_group() : ctx->dp_group());
  const bool peer = comm_group && comm_group->uses_peer_all_reduce();
  if (env.rank == 0) {
    std::printf(
        "{\"impl\": \"trireme-%s\", \"mode\": \"%s\", \"model\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", \"dp\": %lld, "
        "\"tp\": %lld, \"tp_alone\": %lld, \"zero\": %lld, \"gpus\": %d, \"batch_per_rank\": %lld, \"global_batch\": %lld, "
        "\"seq\": %lld, \"params\": %lld, "
        "\"step_ms\": %.3f, \"step_ms_min\": %.3f, \"step_ms_max\": %.3f, \"step_ms_unsynced\": %.3f, "
        "\"tokens_per_s\": %.1f, \"mfu\": %.4f, "
        "\"peak_mem_GiB\": %.3f, \"dp_comm_hidden_fraction\": %.3f, \"host_ms\": %.3f, \"fwd_ms\": %.3f, "
        "\"bwd_ms\": %.3f, \"opt_ms\": %.3f, \"queue_fwd_ms\": %.3f, \"queue_bwd_ms\": %.3f, \"queue_opt_ms\": %.3f, "
        "\"gate_timeouts\": %d, \"peer_all_reduce\": %s}\n",
        TRIREME_VERSION, mode.c_str(), s->name, device_name.c_str(), dtype_arg.c_str(), (long long)dp, (long long)tp,
        (long long)tp_alone, (long long)zero, env.world_size, (long long)batch, (long long)(dp * batch), (long long)s->T,
        (long long)n_params, t * 1e3,
        ts.front() * 1e3, ts.back() * 1e3, unsynced * 1e3, tokens_per_s,
        tokens_per_s * flops_per_token / (989e12 * double(gpus)), peak_gib, hidden, median(host) * 1e3,
        phases ? median(fwd) * 1e3 : 0.0, phases ? median(bwd) * 1e3 : 0.0, phases ? median(upd) * 1e3 : 0.0,
        queued ? median(qfwd) * 1e3 : 0.0, queued ? median(qbwd) * 1e3 : 0.0, queued ? median(qupd) * 1e3 : 0.0,
        gate.timeouts(), peer ? "true" : "false");
    std::fflush(stdout);
  }
  // Every rank done with its collectives before the groups go away.
  if (world) world->barrier({.timeout = std::chrono::seconds(120)})->wait(std::chrono::seconds(120));
  return 0;
}
