// TensorParallelGPT: heads, MLP and vocabulary split over tp, single-process names and init.
#include "trireme/parallel/tp_gpt.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

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
  TRIREME_CHECK(x.dim() == 3 && x.size(2) == d_model, "TensorParallelAttention: expected input (B, T, ", d_model,
                "), got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), H = n_head_local, hd = d_model / n_head, C = H * hd;
  Tensor qkv = c_attn->forward(x);  // (B, T, 3C): this rank's q | k | v
  const std::vector<Tensor> parts = split(qkv, C, 2);  // one node: one gradient buffer for q, k, v
  auto heads = [&](int64_t which) { return transpose(view(parts[size_t(which)], {B, T, H, hd}), 1, 2); };
  Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true);  // (B, H, T, hd)
  y = reshape(transpose(y, 1, 2), {B, T, C});
  return resid_dropout->forward(c_proj->forward(y));
}

TensorParallelMLP::TensorParallelMLP(int64_t d, bool bias, double p, GeluApprox gelu, TpGroup tp)
    : Module("MLP"), gelu_approx(gelu) {
  c_fc = register_module("c_fc", std::make_shared<ColumnParallelLinear>(d, 4 * d, tp, ColumnParallelOptions{.bias = bias}));
  c_proj = register_module("c_proj", std::make_shared<RowParallelLinear>(4 * d, d, tp, bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
}

Tensor TensorParallelMLP::forward(const Tensor& x) {
  return dropout->forward(c_proj->forward(gelu(c_fc->forward(x), gelu_approx)));
}

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
  const Tensor& pos = positions_.get(T, ids.device());
  Tensor x = transformer->wte->forward(ids) + transformer->wpe->forward(pos);
  x = transformer->drop->forward(x);
  for (const auto& layer : transformer->h->as<TensorParallelDecoderLayer>()) x = layer->forward(x);
  x = transformer->ln_f->forward(x);
  // The head is column-parallel over the vocabulary: x enters the tp region here.
  return linear(copy_to_tp_region(x, tp_), lm_head_weight());  // (B, T, V_p / tp)
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
