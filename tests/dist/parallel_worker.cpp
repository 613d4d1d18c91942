// The parallel tests' worker: runs one scenario on this rank when test_dist is started as
// `test_dist parallel-worker <scenario>` (see parallel_worker.h), checking against the
// single-process computation done in the same process.
#include "parallel_worker.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "trireme/dist/env.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/models/gpt.h"
#include "trireme/nn/embedding.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/parallel/zero.h"

using namespace trireme;
using namespace trireme::parallel;
using namespace std::chrono_literals;

namespace {

int g_rank = 0;

#define WCHECK(cond, ...)                                                                     \
  do {                                                                                        \
    if (!(cond)) TRIREME_FAIL("rank ", g_rank, ": check failed at line ", __LINE__, ": " #cond " ", \
                              str_cat(__VA_ARGS__));                                          \
  } while (0)

double max_abs_diff(const Tensor& a, const Tensor& b, int64_t* where = nullptr) {
  TRIREME_CHECK(a.sizes() == b.sizes(), "max_abs_diff: ", a.sizes(), " vs ", b.sizes());
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i] - y[i]) > m && where) *where = int64_t(i);
    m = std::max(m, std::abs(x[i] - y[i]));
  }
  return m;
}

void log(const std::string& s) {
  std::printf("rank %d: %s\n", g_rank, s.c_str());
  std::fflush(stdout);
}

std::shared_ptr<dist::ProcessGroup> connect() {
  dist::DistEnv env = dist::dist_env_from_environment();
  g_rank = env.rank;
  auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 20s));
  return std::make_shared<dist::ProcessGroupGloo>(store, env.rank, env.world_size, dist::GlooOptions{.timeout = 20s});
}

Tensor leaf(const Tensor& t) { return contiguous(t).detach().set_requires_grad(true); }

// ---- tp_layers ----

void tp_layers(const std::shared_ptr<dist::ProcessGroup>& world) {
  const int W = world->size(), r = world->rank();
  ParallelContext ctx(world, {.tp = W});
  TpGroup tp = TpGroup::of(ctx);
  Generator gen(5);

  {  // Column-parallel: Y_r = X A_r + b_r; dX all-reduced.
    const int64_t in = 6, out = 8;
    nn::Linear ref(in, out);
    ColumnParallelLinear col(in, out, tp);
    WCHECK(max_abs_diff(col.weight, shard_of(ref.weight, col.shard_specs().at("weight"))) == 0.0, "init");
    Tensor x0 = randn({3, 5, in}, gen), c = randn({3, 5, out}, gen);
    Tensor xr = leaf(x0), xt = leaf(x0);
    Tensor yr = ref.forward(xr), yt = col.forward(xt);
    const int64_t m = out / W;
    WCHECK(max_abs_diff(yt, narrow(yr, 2, r * m, m)) < 1e-6, "column forward");
    sum(yr * c).backward();
    sum(yt * contiguous(narrow(c, 2, r * m, m))).backward();
    WCHECK(max_abs_diff(xt.grad(), xr.grad()) < 1e-5, "column dX");
    WCHECK(max_abs_diff(col.weight.grad(), shard_of(ref.weight.grad(), col.shard_specs().at("weight"))) < 1e-5, "dA");
    WCHECK(max_abs_diff(col.bias.grad(), shard_of(ref.bias.grad(), col.shard_specs().at("bias"))) < 1e-5, "db");
  }
  {  // Row-parallel: Y = Σ_r X_r A_r + b.
    const int64_t in = 8, out = 6, m = in / W;
    nn::Linear ref(in, out);
    RowParallelLinear row(in, out, tp);
    Tensor x0 = randn({3, 5, in}, gen), c = randn({3, 5, out}, gen);
    Tensor xr = leaf(x0), xt = leaf(narrow(x0, 2, r * m, m));
    Tensor yr = ref.forward(xr), yt = row.forward(xt);
    WCHECK(max_abs_diff(yt, yr) < 1e-5, "row forward");
    sum(yr * c).backward();
    sum(yt * c).backward();
    WCHECK(max_abs_diff(xt.grad(), narrow(xr.grad(), 2, r * m, m)) < 1e-5, "row dX");
    WCHECK(max_abs_diff(row.weight.grad(), shard_of(ref.weight.grad(), row.shard_specs().at("weight"))) < 1e-5, "dA");
    WCHECK(max_abs_diff(row.bias.grad(), ref.bias.grad()) < 1e-5, "db");
  }
  {  // Vocabulary-parallel embedding over 61 ids (padded).
    nn::Embedding ref(61, 4);
    VocabParallelEmbedding emb(61, 4, tp);
    std::vector<int64_t> v;
    for (int64_t i = 0; i < 70; ++i) v.push_back((i * 17) % 61);
    Tensor ids = from_vector(v, {7, 10});
    Tensor c = randn({7, 10, 4}, gen);
    Tensor yr = ref.forward(ids), yt = emb.forward(ids);
    WCHECK(max_abs_diff(yt, yr) < 1e-6, "embedding forward");
    sum(yr * c).backward();
    sum(yt * c).backward();
    WCHECK(max_abs_diff(emb.weight.grad(), shard_of(ref.weight.grad(), emb.shard_specs().at("weight"))) < 1e-5,
           "embedding grad (padding rows zero)");
  }
  {  // Vocabulary-parallel cross-entropy: padding columns set huge, never count.
    const int64_t N = 10, V = 61;
    Tensor logits = mul(randn({N, V}, gen), 3.0);
    Tensor targets = from_vector<int64_t>({0, 60, 17, -100, 31, 45, 2, 59, -100, 8}, {N});
    ShardSpec spec{.dim = 1, .size = W, .rank = r, .full_shape = {N, V}, .pad = true};
    Tensor local = shard_of(logits, spec);
    VocabShard vs = VocabShard::of(ShardSpec{.dim = 0, .size = W, .rank = r, .full_shape = {V, 1}, .pad = true});
    if (vs.real < local.size(1)) {
      Tensor pad = narrow(local, 1, vs.real, local.size(1) - vs.real);
      fill_(pad, 100.0);
    }
    Tensor lr = leaf(logits), lt = leaf(local);
    Tensor ref = cross_entropy(lr, targets), got = vocab_parallel_cross_entropy(lt, targets, vs, tp);
    WCHECK(std::abs(ref.item() - got.item()) < 1e-5 * std::abs(ref.item()), "ce ", ref.item(), " vs ", got.item());
    ref.backward();
    got.backward();
    WCHECK(max_abs_diff(lt.grad(), shard_of(lr.grad(), spec)) < 1e-6, "ce grad");
  }
  {  // gather/scatter along the last dim are each other's transpose.
    Tensor x0 = randn({2, 3, 4 * W}, gen), c = randn({2, 3, 4 * W}, gen);
    Tensor x = leaf(x0);
    Tensor chunk = scatter_to_tp_region(x, tp);
    WCHECK(max_abs_diff(chunk, narrow(x0, 2, 4 * r, 4)) == 0.0, "scatter");
    Tensor back = gather_from_tp_region(chunk, tp);
    WCHECK(max_abs_diff(back, x0) == 0.0, "gather");
    sum(back * c).backward();
    WCHECK(max_abs_diff(x.grad(), c) < 1e-6, "gather/scatter backward");
  }
}

// ---- tp_gpt ----

models::GPTConfig tiny_config(bool tie, double dropout = 0.0, bool llama = false) {
  if (llama) {  // grouped-query (8 q heads on 4 kv heads), rotary, SwiGLU, q/k/v biases
    return {.arch = models::GPTArch::llama, .vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 8,
            .d_model = 32, .dropout = dropout, .bias = false, .tie_embeddings = tie, .ln_eps = 1e-6, .ffn = 48,
            .n_kv_head = 4, .qkv_bias = true};
  }
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 32, .dropout = dropout,
          .tie_embeddings = tie};
}

// Deterministic (B, T) tokens of global batch `step`; sample b is the same whatever the layout.
// Each sample starts at a pseudo-random token and follows tok -> (7 tok + 3) mod V, so the
// model has something to learn and the parameters move.
std::pair<Tensor, Tensor> batch(int64_t step, int64_t first_sample, int64_t count, int64_t T, int64_t V) {
  std::vector<int64_t> x, y;
  for (int64_t b = first_sample; b < first_sample + count; ++b) {
    uint64_t h = uint64_t(step * 1000003 + b * 7919 + 17);
    h ^= h >> 13;
    h *= 0x9e3779b97f4a7c15ull;
    int64_t tok = int64_t((h >> 29) % uint64_t(V));
    for (int64_t t = 0; t <= T; ++t) {
      if (t < T) x.push_back(tok);
      if (t > 0) y.push_back(tok);
      tok = (7 * tok + 3) % V;
    }
  }
  return {from_vector(x, {count, T}), from_vector(y, {count, T})};
}

void tp_gpt(const std::shared_ptr<dist::ProcessGroup>& world, bool llama = false) {
  ParallelContext ctx(world, {.tp = world->size()});
  for (bool tie : {true, false}) {
    models::GPT ref(tiny_config(tie, 0.0, llama), 11);
    models::GPT tp(tiny_config(tie, 0.0, llama), ctx, 11);
    auto [x, y] = batch(0, 0, 4, 8, 61);
    Tensor lr = ref.loss(x, y), lt = tp.loss(x, y);
    WCHECK(std::abs(lr.item() - lt.item()) < 1e-5 * lr.item(), "loss ", lr.item(), " vs ", lt.item());
    lr.backward();
    lt.backward();
    std::map<std::string, Tensor> ref_grads;
    for (auto& [n, p] : ref.named_parameters()) ref_grads[n] = p.grad();
    double worst = 0;
    for (auto& [n, p] : tp.named_parameters()) {
      auto it = tp.shard_specs().find(n);
      Tensor g = it == tp.shard_specs().end() ? p.grad() : gather_shards(p.grad(), it->second, ctx.tp_group());
      double d = max_abs_diff(g, ref_grads.at(n));
      worst = std::max(worst, d);
      WCHECK(d < 1e-5, n, " gradient differs by ", d);
    }
    log(str_cat("tp_gpt tie=", tie, ": loss ", lt.item(), " (single ", lr.item(), "), worst grad diff ", worst));
  }
}

// ---- tp_defer_mixed ----

// Note [deferred gradient sums]: a step of sequence-parallel forwards only gives one process's
// gradients once sum_deferred_grads() has run; a step whose forwards took both the sequence-
// parallel path (partial gradients) and the replicated one (whole gradients) is refused.
void tp_defer_mixed(const std::shared_ptr<dist::ProcessGroup>& world) {
  ParallelContext ctx(world, {.tp = world->size(), .sequence_parallel = true});
  models::GPT ref(tiny_config(true), 11);
  models::GPT tp(tiny_config(true), ctx, 11);
  tp.defer_grad_sums(true);
  auto [x, y] = batch(0, 0, 4, 8, 61);  // 32 tokens: divisible by tp, the sequence-parallel path
  ref.loss(x, y).backward();
  tp.loss(x, y).backward();
  tp.sum_deferred_grads();
  std::map<std::string, Tensor> ref_grads;
  for (auto& [n, p] : ref.named_parameters()) ref_grads[n] = p.grad();
  for (auto& [n, p] : tp.named_parameters()) {
    if (tp.shard_specs().count(n)) continue;  // the replicated ones carry the deferred sums
    const double d = max_abs_diff(p.grad(), ref_grads.at(n));
    WCHECK(d < 1e-5, n, " gradient after the deferred sum differs by ", d);
  }
  auto [x7, y7] = batch(1, 0, 1, 7, 61);  // 7 tokens: not divisible by tp, the replicated path
  tp.loss(x, y).backward();
  tp.loss(x7, y7).backward();
  std::string error;
  try {
    tp.sum_deferred_grads();
  } catch (const std::exception& e) {
    error = e.what();
  }
  WCHECK(error.find("cannot be told apart") != std::string::npos && error.find("defer_grad_sums(false)") != std::string::npos,
         "mixing the paths in one step should be a clear error, got '", error, "'");
  tp.sum_deferred_grads();  // the count starts over: nothing pending, nothing done
  log("tp_defer_mixed: deferred sums match one process; a mixed step is refused");
}

// ---- train:<layout> ----

struct TrainLayout {
  ParallelLayout layout;
  double dropout = 0.0;
  bool overlap = true;  // "nooverlap": every bucket launched at finish()
  bool defer_sums = false;  // "defer": partial gradients summed after the backward (Note [deferred gradient sums])
  bool llama = false;       // "llama": the llama architecture (tiny_config)
};

TrainLayout parse_layout(const std::string& s) {
  TrainLayout t;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.rfind("dp", 0) == 0) t.layout.dp = std::stoi(part.substr(2));
    else if (part.rfind("tp", 0) == 0) t.layout.tp = std::stoi(part.substr(2));
    else if (part.rfind("mb", 0) == 0) t.layout.micro_batches = std::stoi(part.substr(2));
    else if (part == "zero") t.layout.zero = 1;
    else if (part == "drop") t.dropout = 0.1;
    else if (part == "nooverlap") t.overlap = false;
    else if (part == "sp") t.layout.sequence_parallel = true;
    else if (part == "defer") t.defer_sums = true;
    else if (part == "llama") t.llama = true;
    else TRIREME_FAIL("unknown layout part '", part, "' in ", s);
  }
  t.layout.bucket_bytes = 16 << 10;  // several buckets for this small model
  return t;
}

// Note [key bias under Adam]: the key bias of attention has a true gradient of zero (adding a
// constant to every key shifts all of a query's scores equally, which softmax ignores), so its
// computed gradient is rounding noise, which Adam normalises into steps of up to ~lr. Different
// layouts round differently, so that parameter drifts apart at a rate set by lr: at lr 1e-2 it
// reaches 1.8e-4 in 20 steps (everything else stays ~1e-5); at lr 3e-3 every parameter,
// that one included, stays within 4e-5 of one process.
constexpr int kSteps = 20;
constexpr int64_t kBatch = 8, kT = 8, kV = 61;
constexpr uint64_t kSeed = 1234;
const optim::AdamWOptions kAdamW{.lr = 3e-3, .betas = {0.9, 0.95}, .eps = 1e-8, .weight_decay = 0.1};
constexpr double kClip = 0.5;

struct Run {
  std::vector<double> losses, norms;
  std::map<std::string, Tensor> params;
};

Run train_single(double dropout, bool llama) {
  models::GPT model(tiny_config(true, dropout, llama), kSeed);
  optim::AdamW opt(model.named_parameters(), kAdamW);
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    model.set_rng(kSeed, uint64_t(step));
    auto [x, y] = batch(step, 0, kBatch, kT, kV);
    Tensor loss = model.loss(x, y);
    loss.backward();
    run.norms.push_back(optim::clip_grad_norm(opt.params(), kClip));
    opt.step();
    opt.zero_grad();
    run.losses.push_back(loss.item());
  }
  for (auto& [n, p] : model.named_parameters()) run.params[n] = p.detach();
  return run;
}

Run train_parallel(const std::shared_ptr<dist::ProcessGroup>& world, const TrainLayout& t, ReducerStats* stats) {
  ParallelContext ctx(world, t.layout);
  models::GPT model(tiny_config(true, t.dropout, t.llama), ctx, kSeed);
  model.defer_grad_sums(t.defer_sums);
  const auto& L = t.layout;
  Reducer reducer(model.named_parameters(), ctx.dp_group(),
                  {.bucket_bytes = L.bucket_bytes, .zero = L.zero, .overlap = t.overlap});
  std::unique_ptr<optim::AdamW> adamw;
  std::unique_ptr<ZeroOptimizer> zero;
  if (L.zero > 0) zero = std::make_unique<ZeroOptimizer>(reducer, kAdamW);
  else adamw = std::make_unique<optim::AdamW>(model.named_parameters(), kAdamW);
  const int64_t local = kBatch / L.dp, micro = local / L.micro_batches;
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    model.set_rng(kSeed, uint64_t(step));
    double loss_sum = 0;
    for (int m = 0; m < L.micro_batches; ++m) {
      auto [x, y] = batch(step, ctx.dp_rank() * local + m * micro, micro, kT, kV);
      reducer.prepare_backward(/*sync=*/m == L.micro_batches - 1);
      // Where these rows sit in the step's batch, as the trainer says it (Note [dropout keyed by
      // global sample]).
      nn::GlobalRowScope rows(ctx.dp_rank() * local + m * micro);
      Tensor loss = model.loss(x, y) / double(L.micro_batches);
      loss.backward();
      loss_sum += loss.item();
    }
    reducer.finish();
    model.sum_deferred_grads();
    auto pieces = L.zero > 0 ? zero->grad_pieces(model.shard_specs())
                          : grad_pieces(model.named_parameters(), model.shard_specs());
    run.norms.push_back(clip_global_grad_norm(pieces, kClip, ctx));
    if (zero) {
      zero->step();
      zero->zero_grad();
    } else {
      adamw->step();
      adamw->zero_grad();
    }
    Tensor l = full({1}, loss_sum, DType::f64);  // the global batch's loss: the dp mean
    if (ctx.dp_group()) ctx.dp_group()->all_reduce(l, {.op = dist::ReduceOp::avg})->wait();
    run.losses.push_back(l.item());
  }
  for (auto& [n, p] : model.full_state_dict()) run.params[n] = p;
  if (stats) *stats = reducer.stats();
  return run;
}

void train(const std::shared_ptr<dist::ProcessGroup>& world, const std::string& layout_name) {
  TrainLayout t = parse_layout(layout_name);
  WCHECK(t.layout.world_size() == world->size(), layout_name, " needs ", t.layout.world_size(), " processes");
  Run single = train_single(t.dropout, t.llama);
  ReducerStats stats;
  Run par = train_parallel(world, t, &stats);
  double worst_loss = 0, worst_norm = 0, worst_param = 0;
  for (int s = 0; s < kSteps; ++s) {
    double rel = std::abs(par.losses[size_t(s)] - single.losses[size_t(s)]) / std::abs(single.losses[size_t(s)]);
    worst_loss = std::max(worst_loss, rel);
    WCHECK(rel < 1e-4, "step ", s + 1, ": loss ", par.losses[size_t(s)], " vs single ", single.losses[size_t(s)]);
    worst_norm = std::max(worst_norm, std::abs(par.norms[size_t(s)] - single.norms[size_t(s)]) / single.norms[size_t(s)]);
  }
  WCHECK(worst_norm < 1e-4, "grad norms differ by ", worst_norm, " relative");
  // Without overlap no bucket starts before the backward pass has ended.
  WCHECK(t.overlap || stats.hidden_seconds == 0.0, "buckets reduced during the backward pass without overlap: ",
         stats.hidden_seconds, " s");
  WCHECK(par.params.size() == single.params.size(), "parameter count");
  for (auto& [n, p] : single.params) {
    int64_t at = -1;
    double d = max_abs_diff(par.params.at(n), p, &at);
    worst_param = std::max(worst_param, d);
    WCHECK(d < 1e-4, n, " differs by ", d, " at element ", at, " after ", kSteps, " steps");
  }
  log(str_cat(layout_name, ": losses ", single.losses.front(), " -> ", single.losses.back(), "; worst relative loss diff ",
              worst_loss, ", grad-norm diff ", worst_norm, ", max param diff ", worst_param, "; dp reduction ",
              stats.comm_seconds * 1e3, " ms, hidden ", stats.hidden_fraction() * 100, "%"));
}

int run_worker(const std::string& scenario) {
  try {
    auto world = connect();
    if (scenario == "tp_layers") tp_layers(world);
    else if (scenario == "tp_gpt") tp_gpt(world);
    else if (scenario == "tp_llama") tp_gpt(world, /*llama=*/true);
    else if (scenario == "tp_defer_mixed") tp_defer_mixed(world);
    else if (scenario.rfind("train:", 0) == 0) train(world, scenario.substr(6));
    else TRIREME_FAIL("unknown scenario ", scenario);
    log(scenario + " ok");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, e.what());
    return 1;
  }
}

// Runs before GoogleTest's main when this binary was started as a worker.
struct WorkerEntry {
  WorkerEntry() {
    std::ifstream f("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    if (args.size() >= 3 && args[1] == "parallel-worker") {
      int rc = run_worker(args[2]);
      std::fflush(nullptr);
      std::_Exit(rc);
    }
  }
} worker_entry;

}  // namespace
