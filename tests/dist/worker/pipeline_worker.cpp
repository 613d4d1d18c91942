// The worker the pipeline tests launch: trains a tiny GPT for some steps with a pipeline layout
// and, in the same process, with one process's plain GPT on the same seed and data, and checks
// that per-step losses and final parameters agree. Exits 0 when they do.
//   pipeline_worker --pp 2 --dp 1 --tp 1 --layers 4 --schedule 1f1b --micro-batches 4 --virtual 1 --steps 20
// With --tp 2 each stage splits its heads, MLP and vocabulary over 2 ranks (vocabulary 61: padded).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "trireme/autograd/engine.h"
#include "trireme/core/rng.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/parallel/pipeline_executor.h"

using namespace trireme;
using namespace std::chrono_literals;

namespace {

struct Args {
  int pp = 2, dp = 1, tp = 1, layers = 4, micro_batches = 4, virtual_stages = 1, steps = 20;
  double lr = 1e-2;
  std::string schedule = "1f1b";
  std::string arch = "gpt2";  // --arch llama: GQA (4 q heads on 2 kv heads), rotary, SwiGLU, q/k/v biases
};

// Step s's batch (B, T): ids drawn by global sample index; the target is the next id mod V, a
// mapping the model can learn, so the loss moves.
std::pair<Tensor, Tensor> batch(int step, int64_t B, int64_t T, int64_t V) {
  Tensor ids = Tensor::empty({B, T}, DType::i64), tgt = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) {
    int64_t x = int64_t(rng_uniform(1234, uint64_t(step), uint64_t(i)) * double(V)) % V;
    ids.data<int64_t>()[i] = x;
    tgt.data<int64_t>()[i] = (x * 7 + 3) % V;
  }
  return {ids, tgt};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(to_dtype(a.detach(), DType::f64), to_dtype(b.detach(), DType::f64)))).item();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--pp") a.pp = std::atoi(v.c_str());
    else if (k == "--dp") a.dp = std::atoi(v.c_str());
    else if (k == "--tp") a.tp = std::atoi(v.c_str());
    else if (k == "--layers") a.layers = std::atoi(v.c_str());
    else if (k == "--micro-batches") a.micro_batches = std::atoi(v.c_str());
    else if (k == "--virtual") a.virtual_stages = std::atoi(v.c_str());
    else if (k == "--steps") a.steps = std::atoi(v.c_str());
    else if (k == "--schedule") a.schedule = v;
    else if (k == "--lr") a.lr = std::atof(v.c_str());
    else if (k == "--arch" && (v == "gpt2" || v == "llama")) a.arch = v;
    else {
      std::fprintf(stderr, "pipeline_worker: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  int rank = -1;
  try {
    dist::DistEnv env = dist::dist_env_from_environment();
    rank = env.rank;
    std::printf("pid=%d rank=%d\n", int(::getpid()), env.rank);
    auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 20s));
    auto world = std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size,
                                                          dist::GlooOptions{.timeout = 20s});
    parallel::ParallelContext ctx(world, {.dp = a.dp, .tp = a.tp, .pp = a.pp, .micro_batches = a.micro_batches,
                                          .schedule = a.schedule, .virtual_stages = a.virtual_stages});
    std::printf("%s schedule=%s m=%d v=%d layers=%d arch=%s\n", ctx.describe().c_str(), a.schedule.c_str(),
                a.micro_batches, a.virtual_stages, a.layers, a.arch.c_str());

    models::GPTConfig cfg{.vocab_size = 61, .block_size = 8, .n_layer = a.layers, .n_head = 4, .d_model = 32};
    if (a.arch == "llama") {
      cfg.arch = models::GPTArch::llama, cfg.bias = false, cfg.n_kv_head = 2, cfg.qkv_bias = true, cfg.ffn = 48;
    }
    const int64_t B = 8, T = 8;
    const uint64_t seed = 42;
    const optim::AdamWOptions adam{.lr = a.lr, .betas = {0.9, 0.95}, .weight_decay = 0.1};
    const double clip = 1.0;

    // One process: the whole batch through the plain GPT.
    models::GPT gpt(cfg, seed);
    optim::AdamW ref_opt(gpt.named_parameters(), adam);
    std::vector<double> ref_losses;
    for (int s = 0; s < a.steps; ++s) {
      auto [ids, tgt] = batch(s, B, T, cfg.vocab_size);
      ref_opt.zero_grad();
      Tensor loss = gpt.loss(ids, tgt);
      autograd::backward({loss});
      optim::clip_grad_norm(ref_opt.params(), clip);
      ref_opt.step();
      ref_losses.push_back(loss.item());
    }

    // The layout: this dp rank's rows through the pipeline, gradients averaged over dp.
    auto stage = std::make_shared<models::GPT>(cfg, ctx, seed);
    parallel::PipelineExecutor pipe(stage, ctx);
    optim::AdamW opt(stage->named_parameters(), adam);
    const int64_t rows = B / a.dp;
    double worst_loss = 0;
    for (int s = 0; s < a.steps; ++s) {
      auto [ids, tgt] = batch(s, B, T, cfg.vocab_size);
      ids = contiguous(narrow(ids, 0, ctx.dp_rank() * rows, rows));
      tgt = contiguous(narrow(tgt, 0, ctx.dp_rank() * rows, rows));
      opt.zero_grad();
      double loss = pipe.step(ids, tgt);
      if (a.dp > 1) {
        for (auto& [name, p] : stage->named_parameters()) ctx.dp_group()->all_reduce(p.grad(), {.op = dist::ReduceOp::avg})->wait();
        Tensor l = Tensor::empty({1}, DType::f64);
        l.data<double>()[0] = loss;
        ctx.dp_group()->all_reduce(l, {.op = dist::ReduceOp::avg})->wait();
        loss = l.data<double>()[0];
      }
      pipe.clip_grad_norm(clip);
      opt.step();
      const double rel = std::abs(loss - ref_losses[size_t(s)]) / std::abs(ref_losses[size_t(s)]);
      worst_loss = std::max(worst_loss, rel);
      std::printf("step %2d loss %.7f reference %.7f rel %.2e\n", s, loss, ref_losses[size_t(s)], rel);
    }

    // Note: the attention key bias (rows d..2d of c_attn.bias) has an exactly zero gradient
    // (softmax ignores the q.b_k added to every score of a row), so what it gets is rounding
    // noise, different for a micro-batched sum than for one whole-batch sum, which AdamW
    // normalises into lr-sized steps. It is checked apart, with a looser bound; every other
    // parameter element must agree to 1e-4.
    std::map<std::string, Tensor> whole;
    for (auto& [n, t] : gpt.named_parameters()) whole[n] = t;
    double worst_param = 0, worst_key_bias = 0;
    std::string worst_name;
    const bool verbose = std::getenv("PIPELINE_WORKER_VERBOSE") != nullptr;
    // Whole tensors (tp shards gathered: a collective over tp), the stage's parameters only.
    std::map<std::string, Tensor> held;
    for (auto& [n, t] : stage->named_parameters()) held[n] = t;
    for (auto& [n, t] : stage->full_state_dict()) {
      if (!held.count(n)) continue;
      const Tensor& ref = whole.at(n);
      double d = 0;
      if (n.find("attn.c_attn.bias") != std::string::npos) {
        const int64_t D = cfg.d_model;
        d = std::max(max_abs_diff(narrow(ref, 0, 0, D), narrow(t, 0, 0, D)),
                     max_abs_diff(narrow(ref, 0, 2 * D, D), narrow(t, 0, 2 * D, D)));
        worst_key_bias = std::max(worst_key_bias, max_abs_diff(narrow(ref, 0, D, D), narrow(t, 0, D, D)));
      } else {
        d = max_abs_diff(ref, t);
      }
      if (verbose) std::printf("  %-40s %.2e\n", n.c_str(), d);
      if (d >= worst_param) worst_param = d, worst_name = n;
    }
    std::printf("rank %d: max loss rel diff %.2e, max param abs diff %.2e (%s), key bias %.2e, losses %.4f -> %.4f\n",
                rank, worst_loss, worst_param, worst_name.c_str(), worst_key_bias, ref_losses.front(),
                ref_losses.back());
    std::fflush(stdout);
    if (worst_loss > 1e-4 || worst_param > 1e-4 || worst_key_bias > 1e-3) {
      std::fprintf(stderr, "rank %d: the pipeline run differs from one process\n", rank);
      return 1;
    }
    std::printf("rank %d: pipeline equivalence ok\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}
