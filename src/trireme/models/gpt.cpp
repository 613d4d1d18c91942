// GPT model: config validation, structure, initialisation, forward/loss, and HF name mapping.
#include "trireme/models/gpt.h"

#include <cmath>

#include "trireme/core/checked.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

namespace trireme::models {

void GPTConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    TRIREME_CHECK(v > 0, "GPTConfig: ", field, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("block_size", block_size);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("d_model", d_model);
  TRIREME_CHECK(d_model % n_head == 0, "GPTConfig: d_model (", d_model, ") must be divisible by n_head (", n_head,
                ")");
  TRIREME_CHECK(dropout >= 0.0 && dropout < 1.0, "GPTConfig: dropout must be in [0, 1), got ", dropout);
  TRIREME_CHECK(ln_eps > 0.0, "GPTConfig: ln_eps must be positive, got ", ln_eps);
  num_parameters();  // throws when the sizes' products overflow, before anything is allocated
}

int64_t GPTConfig::num_parameters() const {
  // Checked: the sizes may come from a config or a checkpoint, and a count that overflows is
  // an error naming the model's sizes, not a wrapped number.
  auto mul = [this](int64_t a, int64_t b) {
    return checked_mul(a, b, "GPTConfig: the parameter count of d_model = ", d_model, ", n_layer = ", n_layer,
                       ", vocab_size = ", vocab_size, ", block_size = ", block_size);
  };
  auto add = [this](int64_t a, int64_t b) {
    return checked_add(a, b, "GPTConfig: the parameter count of d_model = ", d_model, ", n_layer = ", n_layer,
                       ", vocab_size = ", vocab_size, ", block_size = ", block_size);
  };
  const int64_t d = d_model, V = vocab_size, b = bias ? 1 : 0;
  const int64_t dd = mul(d, d);
  const int64_t ln = d + b * d;
  const int64_t attn = add(add(mul(3, dd), 3 * b * d), add(dd, b * d));
  const int64_t mlp = add(add(mul(4, dd), 4 * b * d), add(mul(4, dd), b * d));
  const int64_t block = add(2 * ln, add(attn, mlp));
  const int64_t embeddings = add(mul(V, d), mul(block_size, d));
  return add(add(embeddings, mul(n_layer, block)), add(ln, tie_embeddings ? 0 : mul(V, d)));
}

GPTTransformer::GPTTransformer(const GPTConfig& c) : Module("GPTTransformer") {
  wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.d_model));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  h = register_module("h", std::make_shared<nn::LayerList>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    h->push_back(std::make_shared<nn::TransformerDecoderLayer>(nn::DecoderLayerOptions{
        .d_model = c.d_model,
        .n_head = c.n_head,
        .bias = c.bias,
        .dropout = c.dropout,
        .ln_eps = c.ln_eps,
        .gelu = c.gelu}));
  }
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
}

GPT::GPT(const GPTConfig& config, uint64_t seed) : Module("GPT"), config_(config) {
  config_.validate();
  transformer = register_module("transformer", std::make_shared<GPTTransformer>(config_));
  if (!config_.tie_embeddings) {
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(config_.d_model, config_.vocab_size, false));
  }
  init_weights(seed);
}

const Tensor& GPT::lm_head_weight() const { return lm_head ? lm_head->weight : transformer->wte->weight; }

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void GPT::init_weights(uint64_t seed) {
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (ends_with(name, ".bias")) {
      nn::init_constant(p, 0.0);
    } else if (p.dim() == 1) {  // LayerNorm weights
      nn::init_constant(p, 1.0);
    } else if (ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight")) {
      nn::init_normal(p, residual_std, seed, name);
    } else {
      nn::init_normal(p, std, seed, name);
    }
  }
}

const Tensor& PositionCache::get(int64_t T, Device device) {
  if (!positions_.defined() || positions_.size(0) != T || positions_.device() != device) {
    positions_ = to_device(arange(T), device);
  }
  return positions_;
}

const Tensor& PositionCache::rows(int64_t first, int64_t count, int64_t T, Device device) {
  if (!rows_.defined() || rows_first_ != first || rows_T_ != T || rows_.size(0) != count || rows_.device() != device) {
    std::vector<int64_t> p(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) p[static_cast<size_t>(i)] = (first + i) % T;
    rows_ = from_vector(p, {count}, device);
    rows_first_ = first;
    rows_T_ = T;
  }
  return rows_;
}

Tensor GPT::forward(const Tensor& ids) {
  TRIREME_CHECK(ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
                "GPT.forward: ids must be (B, T) integers, got ", ids.str());
  const int64_t T = ids.size(1);
  TRIREME_CHECK(T >= 1 && T <= config_.block_size, "GPT.forward: sequence length ", T,
                " is outside [1, block_size = ", config_.block_size, "]");
  const Tensor& pos = positions_.get(T, ids.device());
  Tensor x = transformer->wte->forward(ids) + transformer->wpe->forward(pos);  // (B, T, d) + (T, d)
  x = transformer->drop->forward(x);
  for (const auto& layer : transformer->h->as<nn::TransformerDecoderLayer>()) x = layer->forward(x);
  x = transformer->ln_f->forward(x);
  return linear(x, lm_head_weight());  // (B, T, V)
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  TRIREME_CHECK(targets.sizes() == ids.sizes(), "GPT.loss: targets ", targets.sizes(), " must match ids ",
                ids.sizes());
  Tensor logits = forward(ids);
  const int64_t V = config_.vocab_size;
  return cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}));
}

// ---- Hugging Face mapping (Note [Hugging Face GPT-2 checkpoints]) ----

bool gpt_hf_is_conv1d(const std::string& name) {
  return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
         ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
}

std::map<std::string, Tensor> gpt_state_dict_from_hf(const std::map<std::string, Tensor>& hf, bool tie) {
  std::map<std::string, Tensor> out;
  for (const auto& [hf_name, t] : hf) {
    if (ends_with(hf_name, ".attn.bias") || ends_with(hf_name, ".attn.masked_bias")) continue;
    if (hf_name == "lm_head.weight" && tie) continue;
    std::string name = hf_name;
    if (name != "lm_head.weight" && name.rfind("transformer.", 0) != 0) name = "transformer." + name;
    Tensor v = gpt_hf_is_conv1d(name) ? contiguous(transpose(t.detach(), 0, 1)) : t;
    TRIREME_CHECK(out.emplace(name, v).second, "gpt_state_dict_from_hf: '", name, "' appears twice (under ",
                  "both naming conventions?)");
  }
  return out;
}

std::map<std::string, Tensor> gpt_state_dict_to_hf(const nn::NamedTensors& ours, bool tie) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : ours) {
    out[name] = gpt_hf_is_conv1d(name) ? contiguous(transpose(t.detach(), 0, 1)) : t.detach();
    if (tie && name == "transformer.wte.weight") out["lm_head.weight"] = t.detach();
  }
  return out;
}

}  // namespace trireme::models
