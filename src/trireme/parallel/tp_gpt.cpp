// TensorParallelGPT: heads, MLP and vocabulary split over tp, single-process names and init.
#include "trireme/parallel/tp_gpt.h"

#include <cmath>
#include <string>

#include "trireme/autograd/grad_mode.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/sp_linear.h"

namespace trireme::parallel {

// ---- blocks ----

TensorParallelAttention::TensorParallelAttention(int64_t d, int64_t h, bool bias, double p, TpGroup tp)
    : Module("MultiHeadAttention"), d_model(d), n_head(h) {
  TRIREME_CHECK(d % h == 0, "TensorParallelAttention: d_model ", d, " must be a multiple of n_head ", h);
  TRIREME_CHECK(h % tp.size == 0, "tensor parallelism: n_head (", h, ") must be divisible by tp (", tp.size,
                ") so that each rank holds whole heads");
  n_head_local = h / tp.size;
  c_attn = register_module("c_attn", std::make_shared<ColumnParallelLinear>(
                                         d, 3 * d, tp, ColumnParallelOptions{.bias = bias, .blocks = 3}));
  c_proj = register_module("c_proj", std::make_shared<RowParallelLinear>(d, d, tp, bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(p));
}

Tensor TensorParallelAttention::forward(const Tensor& x) {
  PendingSum p = start(x);
  return finish(p);
}

Tensor TensorParallelAttention::finish(PendingSum& p) {
  return resid_dropout->forward(c_proj->finish(p.partial, p.work));
}

PendingSum TensorParallelAttention::start(const Tensor& x) {
  TRIREME_CHECK(x.dim() == 3 && x.size(2) == d_model, "TensorParallelAttention: expected input (B, T, ", d_model,
                "), got ", x.sizes());
  return attend(c_attn->forward(x), /*sp=*/false, Tensor());  // (B, T, 3C): this rank's q | k | v
}

PendingSum TensorParallelAttention::start_sp(const Tensor& x_rows, int64_t B, int64_t T, const Tensor& proj_bias,
                                             const Tensor& residual) {
  const TpGroup& tp = c_attn->tp;
  const Tensor qkv = sp_column_parallel_linear(x_rows, c_attn->weight, c_attn->bias, tp);
  return attend(reshape(qkv, {B, T, qkv.size(1)}), /*sp=*/true, proj_bias, residual);
}

Tensor TensorParallelAttention::attention(const Tensor& qkv) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = n_head_local, hd = d_model / n_head, C = H * hd;
  const std::vector<Tensor> parts = split(qkv, C, 2);  // one node: one gradient buffer for q, k, v
  auto heads = [&](int64_t which) { return transpose(view(parts[size_t(which)], {B, T, H, hd}), 1, 2); };
  const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true);  // (B, H, T, hd)
  return reshape(transpose(y, 1, 2), {B, T, C});
}

PendingSum TensorParallelAttention::attend(const Tensor& qkv, bool sp, const Tensor& proj_bias,
                                           const Tensor& residual) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = n_head_local * (d_model / n_head);
  const Tensor y = attention(qkv);
  PendingSum p;
  p.partial = sp ? sp_row_parallel_linear_start(reshape(y, {B * T, C}), c_proj->weight, proj_bias, c_proj->tp, p.work,
                                                residual)
                 : c_proj->start(y, p.work);
  return p;
}

TensorParallelMLP::TensorParallelMLP(int64_t d, bool bias, double p, GeluApprox gelu, TpGroup tp)
    : Module("MLP"), gelu_approx(gelu) {
  c_fc = register_module("c_fc", std::make_shared<ColumnParallelLinear>(d, 4 * d, tp, ColumnParallelOptions{.bias = bias}));
  c_proj = register_module("c_proj", std::make_shared<RowParallelLinear>(4 * d, d, tp, bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
}

Tensor TensorParallelMLP::forward(const Tensor& x) {
  PendingSum p = start(x);
  return finish(p);
}

PendingSum TensorParallelMLP::start(const Tensor& x) {
  PendingSum p;
  p.partial = c_proj->start(gelu(c_fc->forward(x), gelu_approx), p.work);
  return p;
}

PendingSum TensorParallelMLP::start_sp(const Tensor& x_rows, const Tensor& proj_bias, const Tensor& residual) {
  const Tensor h = gelu(sp_column_parallel_linear(x_rows, c_fc->weight, c_fc->bias, c_fc->tp), gelu_approx);
  PendingSum p;
  p.partial = sp_row_parallel_linear_start(h, c_proj->weight, proj_bias, c_proj->tp, p.work, residual);
  return p;
}

Tensor TensorParallelMLP::finish(PendingSum& p) { return dropout->forward(c_proj->finish(p.partial, p.work)); }

TensorParallelDecoderLayer::TensorParallelDecoderLayer(const models::GPTConfig& c, TpGroup tp)
    : Module("TransformerDecoderLayer") {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
  attn = register_module("attn", std::make_shared<TensorParallelAttention>(c.d_model, c.n_head, c.bias, c.dropout, tp));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
  mlp = register_module("mlp", std::make_shared<TensorParallelMLP>(c.d_model, c.bias, c.dropout, c.gelu, tp));
}

Tensor TensorParallelDecoderLayer::forward(const Tensor& x) {
  Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

std::vector<Tensor> TensorParallelDecoderLayer::partial_grad_params() const {
  return {ln_1->weight, ln_1->bias, ln_2->weight, ln_2->bias, attn->c_proj->bias, mlp->c_proj->bias};
}

Tensor TensorParallelDecoderLayer::forward_sp(const Tensor& x, int64_t B, int64_t T, bool sum_grads) {
  const std::vector<Tensor> p =
      sum_grads ? sum_grads_over_tp(partial_grad_params(), attn->c_proj->tp) : partial_grad_params();
  // The sum scattered to this rank's rows with the bias added, then dropout on those rows, then
  // the skip connection. When the dropout does nothing, the reduce-scatter's sum adds the skip
  // connection in its own pass (sp_row_parallel_linear_start's residual).
  auto sub_layer = [](const Tensor& skip, nn::Dropout& drop, auto&& start) {
    const bool fuse = drop.is_identity();
    PendingSum s = start(fuse ? skip : Tensor());
    if (s.work) s.work->wait();
    return fuse ? s.partial : skip + drop.forward(s.partial);
  };
  Tensor h = sub_layer(x, *attn->resid_dropout, [&](const Tensor& residual) {
    return attn->start_sp(layer_norm(x, p[0], p[1], ln_1->eps), B, T, p[4], residual);
  });
  return sub_layer(h, *mlp->dropout, [&](const Tensor& residual) {
    return mlp->start_sp(layer_norm(h, p[2], p[3], ln_2->eps), p[5], residual);
  });
}

TensorParallelTransformer::TensorParallelTransformer(const models::GPTConfig& c, TpGroup tp)
    : Module("GPTTransformer") {
  wte = register_module("wte", std::make_shared<VocabParallelEmbedding>(c.vocab_size, c.d_model, tp));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.d_model));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  h = register_module("h", std::make_shared<nn::LayerList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<TensorParallelDecoderLayer>(c, tp));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
}

// ---- the model ----

TensorParallelGPT::TensorParallelGPT(const models::GPTConfig& config, const ParallelContext& ctx, uint64_t seed)
    : Module("GPT"), config_(config), tp_(TpGroup::of(ctx)) {
  build(seed);
}

TensorParallelGPT::TensorParallelGPT(const models::GPTConfig& config, TpGroup tp, uint64_t seed)
    : Module("GPT"), config_(config), tp_(tp) {
  build(seed);
}

void TensorParallelGPT::build(uint64_t seed) {
  config_.validate();
  transformer = register_module("transformer", std::make_shared<TensorParallelTransformer>(config_, tp_));
  if (!config_.tie_embeddings) {
    lm_head = register_module("lm_head", std::make_shared<ColumnParallelLinear>(
                                             config_.d_model, config_.vocab_size, tp_,
                                             ColumnParallelOptions{.bias = false, .pad = true}));
  }
  specs_ = collect_shard_specs(*this);
  init_weights(seed);
}

const Tensor& TensorParallelGPT::lm_head_weight() const {
  return lm_head ? lm_head->weight : transformer->wte->weight;
}

VocabShard TensorParallelGPT::vocab_shard() const {
  return VocabShard::of(specs_.at(lm_head ? "lm_head.weight" : "transformer.wte.weight"));
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void TensorParallelGPT::init_weights(uint64_t seed) {
  // The same rule, name by name, as models::GPT::init_weights; shards draw their slices.
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (ends_with(name, ".bias")) {
      nn::init_constant(p, 0.0);
      continue;
    }
    if (p.dim() == 1) {
      nn::init_constant(p, 1.0);
      continue;
    }
    const double s = (ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight")) ? residual_std : std;
    auto it = specs_.find(name);
    if (it != specs_.end()) {
      init_shard_normal(p, it->second, s, seed, name);
    } else {
      nn::init_normal(p, s, seed, name);
    }
  }
}

Tensor TensorParallelGPT::forward_local_logits(const Tensor& ids) {
  TRIREME_CHECK(ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
                "TensorParallelGPT.forward: ids must be (B, T) integers, got ", ids.str());
  const int64_t T = ids.size(1);
  TRIREME_CHECK(T >= 1 && T <= config_.block_size, "TensorParallelGPT.forward: sequence length ", T,
                " is outside [1, block_size = ", config_.block_size, "]");
  // Gathered by sequence parallelism, whose backward sums the head's input gradient over tp.
  if (auto hidden = sequence_parallel_hidden(ids)) return linear(*hidden, lm_head_weight());
  if (defer_grad_sums_ && autograd::grad_enabled()) ++whole_forwards_;  // Note [deferred gradient sums]
  const Tensor& pos = positions_.get(T, ids.device());
  Tensor x = transformer->wte->forward(ids) + transformer->wpe->forward(pos);
  x = transformer->drop->forward(x);
  x = transformer->ln_f->forward(blocks(x));
  // The head is column-parallel over the vocabulary: x enters the tp region here.
  return linear(copy_to_tp_region(x, tp_), lm_head_weight());  // (B, T, V_p / tp)
}

// Splitting a forward's rows (batch slices, sequence-parallel tokens) runs each dropout layer
// once per part under a GlobalRowScope, which draws with the layer's current counter. Without
// a caller's scope a single forward advances each counter once per call, which the parts would
// do several times; so then, and only if dropout draws at all, the rows stay whole.
bool TensorParallelGPT::dropout_can_split_rows() const {
  return !(is_training() && config_.dropout > 0) || nn::GlobalRowScope::current().has_value();
}

Tensor TensorParallelGPT::blocks(const Tensor& x) {
  Tensor h = x;
  for (const auto& layer : transformer->h->as<TensorParallelDecoderLayer>()) h = layer->forward(h);
  return h;
}

std::optional<Tensor> TensorParallelGPT::sequence_parallel_hidden(const Tensor& ids) {
  const int64_t B = ids.size(0), T = ids.size(1), d = config_.d_model, n = B * T;
  const auto outer_row = nn::GlobalRowScope::current();
  if (!tp_.sequence_parallel || tp_.size == 1 || n % tp_.size != 0 || !dropout_can_split_rows()) return std::nullopt;
  const int64_t rows = n / tp_.size, first = int64_t(tp_.rank) * rows;
  const bool sum_now = !defer_grad_sums_;  // Note [deferred gradient sums]
  auto partial = [&](std::vector<Tensor> params) { return sum_now ? sum_grads_over_tp(params, tp_) : params; };
  if (!sum_now && autograd::grad_enabled()) ++partial_forwards_;
  // This rank's token rows: the lookup summed over tp straight into them, plus their positions.
  const Tensor wpe = partial({transformer->wpe->weight})[0];
  Tensor tokens = reduce_scatter_rows_to_sp(reshape(transformer->wte->forward_partial(ids), {n, d}), tp_);
  Tensor pos = embedding(wpe, positions_.rows(first, rows, T, ids.device()));
  // Dropout over token rows: token j of the global batch is row outer_row T + j.
  nn::GlobalRowScope token_rows(outer_row.value_or(0) * T + first);
  Tensor x = transformer->drop->forward(tokens + pos);
  for (const auto& layer : transformer->h->as<TensorParallelDecoderLayer>()) x = layer->forward_sp(x, B, T, sum_now);
  const std::vector<Tensor> ln_f = partial({transformer->ln_f->weight, transformer->ln_f->bias});
  x = layer_norm(x, ln_f[0], ln_f[1], transformer->ln_f->eps);
  return reshape(gather_rows_from_sp(x, tp_), {B, T, d});
}

void TensorParallelGPT::sum_deferred_grads() {
  const int partial = partial_forwards_, whole = whole_forwards_;
  partial_forwards_ = whole_forwards_ = 0;
  if (partial == 0) return;
  TRIREME_CHECK(whole == 0, "TensorParallelGPT: of this step's forwards ", partial,
                " left their layer-norm gradients partial (sequence parallelism, deferred sums) and ", whole,
                " did not (the replicated path: rows not divisible by tp, or dropout that cannot split them); "
                "their sum cannot be told apart. Give every micro-batch a token count divisible by tp, or "
                "call defer_grad_sums(false)");
  std::vector<Tensor> params{transformer->wpe->weight, transformer->ln_f->weight, transformer->ln_f->bias};
  for (const auto& layer : transformer->h->as<TensorParallelDecoderLayer>())
    for (const Tensor& p : layer->partial_grad_params()) params.push_back(p);
  sum_partial_grads_over_tp(params, tp_);
}

Tensor TensorParallelGPT::loss(const Tensor& ids, const Tensor& targets) {
  TRIREME_CHECK(targets.sizes() == ids.sizes(), "TensorParallelGPT.loss: targets ", targets.sizes(),
                " must match ids ", ids.sizes());
  Tensor logits = forward_local_logits(ids);
  if (tp_.size == 1) return cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}));
  return vocab_parallel_cross_entropy(reshape(logits, {-1, logits.size(-1)}), reshape(targets, {-1}), vocab_shard(),
                                      tp_);
}

nn::NamedTensors TensorParallelGPT::full_state_dict() const {
  nn::NamedTensors out;
  for (const auto& [name, t] : state_dict()) {
    auto it = specs_.find(name);
    out.emplace_back(name, it == specs_.end() ? t.detach() : gather_shards(t, it->second, tp_.group));
  }
  return out;
}

void TensorParallelGPT::load_full_state_dict(const std::map<std::string, Tensor>& full) {
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : full) {
    auto it = specs_.find(name);
    mine[name] = it == specs_.end() ? t : shard_of(t, it->second);
  }
  load_state_dict(mine);
}

}  // namespace trireme::parallel
