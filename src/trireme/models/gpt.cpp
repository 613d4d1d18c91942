// GPT model: config validation, the one definition for every layout (placement, structure,
// initialisation, forward and loss, whole tensors), and the Hugging Face name mapping.
#include "trireme/models/gpt.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/checked.h"
#include "trireme/nn/checkpoint.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/pipeline_schedule.h"
#include "trireme/parallel/tp_mappings.h"

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
  TRIREME_CHECK(ffn >= 0, "GPTConfig: ffn must be non-negative (0: 4 d_model), got ", ffn);
  TRIREME_CHECK(num_classes >= 0, "GPTConfig: num_classes must be non-negative (0: a language model), got ",
                num_classes);
  if (arch == GPTArch::llama) {
    TRIREME_CHECK(n_kv_head >= 0 && n_head % kv_heads() == 0, "GPTConfig: n_kv_head (", n_kv_head,
                  ") must divide n_head (", n_head, ")");
    TRIREME_CHECK((d_model / n_head) % 2 == 0, "GPTConfig: rotary embeddings need an even head size, got d_model / n_head = ",
                  d_model / n_head);
    TRIREME_CHECK(rope_theta > 0.0, "GPTConfig: rope_theta must be positive, got ", rope_theta);
  } else {
    TRIREME_CHECK(n_kv_head == 0 && !qkv_bias, "GPTConfig: n_kv_head and qkv_bias are for arch llama; arch gpt2 has "
                  "n_head key/value heads and its biases follow bias");
  }
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
  const bool llama = arch == GPTArch::llama;
  const int64_t d = d_model, V = vocab_size, b = bias && !llama ? 1 : 0, f = ffn_size();
  const int64_t kv_d = kv_heads() * (d / n_head), qkv = d + 2 * kv_d;
  const int64_t ln = d + b * d;
  const int64_t attn = add(add(mul(qkv, d), (b || qkv_bias) ? qkv : 0), add(mul(d, d), b * d));
  const int64_t mlp = add(add(mul(llama ? 2 * f : f, d), b * f), add(mul(f, d), b * d));
  const int64_t block = add(2 * ln, add(attn, mlp));
  const int64_t embeddings = add(mul(V, d), llama ? 0 : mul(block_size, d));
  // The head: the classifier's (C, d) and bias (Note [classifier head]), or an untied lm_head.
  const int64_t head = num_classes > 0 ? mul(num_classes, d + 1) : tie_embeddings ? 0 : mul(V, d);
  return add(add(embeddings, mul(n_layer, block)), add(ln, head));
}

// ---- placement and structure ----

GPTPlacement GPTPlacement::of(const parallel::ParallelContext& ctx, std::vector<int> layer_sizes) {
  const parallel::ParallelLayout& L = ctx.layout();
  const bool interleaved = parallel::schedule_kind_from_name(L.schedule) == parallel::ScheduleKind::interleaved;
  return {.tp = parallel::TpGroup::of(ctx),
          .sequence_parallel = L.sequence_parallel,
          .pipeline = {.stages = L.pp, .rank = ctx.pp_rank(), .virtual_stages = interleaved ? L.virtual_stages : 1},
          .layer_sizes = std::move(layer_sizes)};
}

GPT::GPT(const GPTConfig& config, uint64_t seed) : GPT(config, GPTPlacement{}, seed) {}

GPT::GPT(const GPTConfig& config, const parallel::ParallelContext& ctx, uint64_t seed, std::vector<int> layer_sizes)
    : GPT(config, GPTPlacement::of(ctx, std::move(layer_sizes)), seed) {}

GPT::GPT(const GPTConfig& config, const GPTPlacement& placement, uint64_t seed)
    : PipelineModel("GPT"), config_(config), placement_(placement) {
  config_.validate();
  const parallel::PipelinePosition& pp = placement_.pipeline;
  TRIREME_CHECK(pp.stages >= 1 && pp.rank >= 0 && pp.rank < pp.stages, "GPT: pipeline rank ", pp.rank,
                " is outside [0, ", pp.stages, ")");
  TRIREME_CHECK(pp.virtual_stages >= 1, "GPT: virtual_stages must be >= 1, got ", pp.virtual_stages);
  TRIREME_CHECK(!placement_.sequence_parallel || pp.stages == 1,
                "GPT: sequence parallelism inside pipeline stages is not supported (pp = ", pp.stages, ")");
  ranges_ = parallel::pipeline_partition(int(config_.n_layer), pp.stages * pp.virtual_stages, placement_.layer_sizes);

  // Registration in GPT-2's order (wte, wpe, drop, h, ln_f, lm_head), holding only what this
  // rank's chunks need, so names and named_parameters() order are the single process's.
  const GPTConfig& c = config_;
  const parallel::TpGroup& tp = placement_.tp;
  const bool first = pp.is_first(0), last = pp.is_last(pp.virtual_stages - 1);
  transformer = register_module("transformer", std::make_shared<GPTTransformer>());
  const bool classifies = c.num_classes > 0;  // Note [classifier head]
  if (first || (last && c.tie_embeddings && !classifies)) {
    transformer->wte = transformer->register_module(
        "wte", std::make_shared<parallel::VocabParallelEmbedding>(c.vocab_size, c.d_model, tp));
  }
  if (first) {
    if (c.arch == GPTArch::gpt2)
      transformer->wpe = transformer->register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.d_model));
    transformer->drop = transformer->register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  }
  transformer->h = transformer->register_module("h", std::make_shared<nn::Module>("LayerList"));
  for (int chunk = 0; chunk < pp.virtual_stages; ++chunk) {
    blocks_.emplace_back();
    for (int i = layers(chunk).begin; i < layers(chunk).end; ++i) {
      blocks_.back().push_back(transformer->h->register_module(std::to_string(i), std::make_shared<GPTBlock>(c, tp)));
    }
  }
  if (last) {
    transformer->ln_f = transformer->register_module("ln_f", gpt_norm(c));
    if (classifies) {
      classifier = register_module("classifier", std::make_shared<nn::Linear>(c.d_model, c.num_classes));
    } else if (!c.tie_embeddings) {
      lm_head = register_module("lm_head", std::make_shared<parallel::ColumnParallelLinear>(
                                               c.d_model, c.vocab_size, tp,
                                               parallel::ColumnParallelOptions{.bias = false, .pad = true}));
    }
  }
  specs_ = parallel::collect_shard_specs(*this);
  init_weights(seed);
}

parallel::StageLayers GPT::layers(int chunk) const {
  return ranges_.at(size_t(placement_.pipeline.virtual_stage(chunk)));
}

const Tensor& GPT::lm_head_weight() const {
  TRIREME_CHECK(!classifier, "GPT: a classifier (num_classes = ", config_.num_classes, ") has no language-model head");
  TRIREME_CHECK(lm_head || (transformer->wte && placement_.pipeline.is_last(placement_.pipeline.virtual_stages - 1)),
                "GPT: pipeline rank ", placement_.pipeline.rank, " does not hold the head");
  return lm_head ? lm_head->weight : transformer->wte->weight;
}

parallel::VocabShard GPT::vocab_shard() const {
  return parallel::VocabShard::of(specs_.at(lm_head ? "lm_head.weight" : "transformer.wte.weight"));
}

DType GPT::activation_dtype() const {
  for (const auto& [name, p] : named_parameters()) return p.dtype();
  return DType::f32;
}

Tensor GPT::tied_weight() const {
  if (!config_.tie_embeddings || config_.num_classes > 0 || placement_.pipeline.stages == 1) return Tensor();
  // Rank 0 (embedding use) or the last rank (head use), never both; with tp, this rank's shard.
  return transformer->wte ? transformer->wte->weight : Tensor();
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void GPT::init_weights(uint64_t seed) {
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (name.find(".lora.") != std::string::npos) continue;  // the adapters keep their own scheme
    if (ends_with(name, ".bias")) {
      nn::init_constant(p, 0.0);
    } else if (p.dim() == 1) {  // LayerNorm weights
      nn::init_constant(p, 1.0);
    } else {
      const bool residual = ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight");
      const double s = residual ? residual_std : std;
      auto it = specs_.find(name);
      if (it != specs_.end()) {
        parallel::init_shard_normal(p, it->second, s, seed, name);
      } else {
        nn::init_normal(p, s, seed, name);
      }
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

// ---- forward ----

Tensor GPT::forward(const Tensor& ids) {
  TRIREME_CHECK(placement_.pipeline.stages == 1, "GPT.forward: this process holds pipeline stage ",
                placement_.pipeline.rank, " of ", placement_.pipeline.stages, "; run it with forward_chunk");
  return forward_chunk(0, ids);
}

Tensor GPT::forward_chunk(int chunk, const Tensor& input) {
  const parallel::PipelinePosition& pp = placement_.pipeline;
  TRIREME_CHECK(chunk >= 0 && chunk < pp.virtual_stages, "GPT.forward: chunk ", chunk, " is outside [0, ",
                pp.virtual_stages, ")");
  Tensor x = input;
  if (pp.is_first(chunk)) {
    TRIREME_CHECK(x.dim() == 2 && (x.dtype() == DType::i64 || x.dtype() == DType::i32),
                  "GPT.forward: ids must be (B, T) integers, got ", x.str());
    const int64_t T = x.size(1);
    TRIREME_CHECK(T >= 1 && T <= config_.block_size, "GPT.forward: sequence length ", T,
                  " is outside [1, block_size = ", config_.block_size, "]");
    if (pp.stages == 1) {
      // Gathered from the sequence-parallel rows, whose backward already makes the head's input
      // gradient whole (Note [classifier head] for a classifier's): no copy into the tp region.
      if (auto hidden = sequence_parallel_hidden(x))
        return classifier ? classifier->forward(*hidden) : linear(*hidden, lm_head_weight());
    }
    if (defer_grad_sums_ && autograd::grad_enabled()) ++whole_forwards_;  // Note [deferred gradient sums]
    Tensor tokens = transformer->wte->forward(x);
    if (transformer->wpe) tokens = tokens + transformer->wpe->forward(positions_.get(T, x.device()));  // (B, T, d) + (T, d)
    x = transformer->drop->forward(tokens);
  } else {
    TRIREME_CHECK(x.dim() == 3 && x.size(2) == config_.d_model, "GPT.forward: virtual stage ", pp.virtual_stage(chunk),
                  " takes activations (b, T, ", config_.d_model, "), got ", x.str());
  }
  const auto& held = blocks(chunk);
  for (size_t i = 0; i < held.size(); ++i) {
    x = run_block(i, held[i], x, [block = held[i].get()](const Tensor& in) { return block->forward(in); });
  }
  if (!pp.is_last(chunk)) return x;
  return head(transformer->ln_f->forward(x));
}

void GPT::set_recompute(Recompute mode, int64_t layers) {
  recompute_ = mode, recompute_layers_ = layers;
  for (const auto& chunk : blocks_) {
    for (size_t i = 0; i < chunk.size(); ++i) {
      chunk[i]->set_selective_recompute(mode == Recompute::selective && (layers < 0 || int64_t(i) < layers));
    }
  }
}

Tensor GPT::run_block(size_t i, const std::shared_ptr<GPTBlock>& block, const Tensor& x,
                      std::function<Tensor(const Tensor&)> forward) const {
  const bool recompute =
      recompute_ == Recompute::full && (recompute_layers_ < 0 || int64_t(i) < recompute_layers_);
  std::function<Tensor(const Tensor&)> run = forward;
  if (recompute) run = [&block, &forward](const Tensor& in) { return nn::checkpointed(block, in, forward); };
  return wrap_ ? wrap_(i, x, run) : run(x);
}

Tensor GPT::head(const Tensor& hidden) const {
  if (classifier) return classifier->forward(hidden);  // whole on every tp rank (Note [classifier head])
  // The head is column-parallel over the vocabulary: the hidden state enters the tp region here.
  return linear(parallel::copy_to_tp_region(hidden, placement_.tp), lm_head_weight());  // (B, T, V_p / tp)
}

// Splitting a forward's rows (batch slices, sequence-parallel tokens) runs each dropout layer
// once per part under a GlobalRowScope, which draws with the layer's current counter. Without
// a caller's scope a single forward advances each counter once per call, which the parts would
// do several times; so then, and only if dropout draws at all, the rows stay whole.
bool GPT::dropout_can_split_rows() const {
  return !(is_training() && config_.dropout > 0) || nn::GlobalRowScope::current().has_value();
}

std::optional<Tensor> GPT::sequence_parallel_hidden(const Tensor& ids) {
  const parallel::TpGroup& tp = placement_.tp;
  const int64_t B = ids.size(0), T = ids.size(1), d = config_.d_model, n = B * T;
  const auto outer_row = nn::GlobalRowScope::current();
  if (!placement_.sequence_parallel || tp.size == 1 || n % tp.size != 0 || !dropout_can_split_rows()) {
    return std::nullopt;
  }
  const int64_t rows = n / tp.size, first = int64_t(tp.rank) * rows;
  const bool sum_now = !defer_grad_sums_;  // Note [deferred gradient sums]
  auto partial = [&](std::vector<Tensor> params) {
    return sum_now ? parallel::sum_grads_over_tp(params, tp) : params;
  };
  if (!sum_now && autograd::grad_enabled()) ++partial_forwards_;
  // This rank's token rows: the lookup summed over tp straight into them, plus their positions.
  Tensor tokens = parallel::reduce_scatter_rows_to_sp(reshape(transformer->wte->forward_partial(ids), {n, d}), tp);
  if (transformer->wpe) {
    const Tensor wpe = partial({transformer->wpe->weight})[0];
    tokens = tokens + embedding(wpe, positions_.rows(first, rows, T, ids.device()));
  }
  // Dropout over token rows: token j of the global batch is row outer_row T + j.
  nn::GlobalRowScope token_rows(outer_row.value_or(0) * T + first);
  Tensor x = transformer->drop->forward(tokens);
  const auto& held = blocks(0);
  for (size_t i = 0; i < held.size(); ++i) {
    x = run_block(i, held[i], x, [block = held[i].get(), B, T, sum_now](const Tensor& in) {
      return block->forward_sp(in, B, T, sum_now);
    });
  }
  const std::vector<Tensor> ln_f = partial({transformer->ln_f->weight, transformer->ln_f->bias});
  x = transformer->ln_f->apply(x, ln_f[0], ln_f[1]);
  if (classifier) {
    // The classifier's input gradient is whole on every rank (Note [classifier head]): the rows
    // are gathered as columns of the transpose, whose backward keeps this rank's chunk unsummed.
    const Tensor columns = parallel::gather_from_tp_region(contiguous(transpose(x, 0, 1)), tp);  // (d, n)
    return reshape(contiguous(transpose(columns, 0, 1)), {B, T, d});
  }
  return reshape(parallel::gather_rows_from_sp(x, tp), {B, T, d});
}

void GPT::sum_deferred_grads() {
  const int partial = partial_forwards_, whole = whole_forwards_;
  partial_forwards_ = whole_forwards_ = 0;
  if (partial == 0) return;
  TRIREME_CHECK(whole == 0, "GPT: of this step's forwards ", partial,
                " left their layer-norm gradients partial (sequence parallelism, deferred sums) and ", whole,
                " did not (the replicated path: rows not divisible by tp, or dropout that cannot split them); "
                "their sum cannot be told apart. Give every micro-batch a token count divisible by tp, or "
                "call defer_grad_sums(false)");
  std::vector<Tensor> params{transformer->wpe ? transformer->wpe->weight : Tensor(), transformer->ln_f->weight,
                             transformer->ln_f->bias};
  for (const auto& block : blocks(0))
    for (const Tensor& p : block->partial_grad_params()) params.push_back(p);
  parallel::sum_partial_grads_over_tp(params, placement_.tp);
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  TRIREME_CHECK(targets.sizes() == ids.sizes(), "GPT.loss: targets ", targets.sizes(), " must match ids ",
                ids.sizes());
  return loss_of(forward(ids), targets);
}

Tensor GPT::loss_of(const Tensor& logits, const Tensor& targets) const {
  if (classifier) {  // whole logits on every tp rank (Note [classifier head])
    const int64_t C = config_.num_classes;
    TRIREME_CHECK(logits.dim() == 3 && logits.size(2) == C, "GPT.loss: logits ", logits.sizes(),
                  " are not (b, T, num_classes = ", C, ")");
    TRIREME_CHECK(targets.dim() == 2 && targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1),
                  "GPT.loss: targets ", targets.sizes(), " must be (b, T) of logits ", logits.sizes());
    return cross_entropy(reshape(logits, {-1, C}), reshape(targets, {-1}));
  }
  const parallel::TpGroup& tp = placement_.tp;
  const int64_t V = parallel::round_up(config_.vocab_size, tp.size) / tp.size;
  TRIREME_CHECK(logits.dim() == 3 && logits.size(2) == V, "GPT.loss: logits ", logits.sizes(), " are not (b, T, ",
                tp.size > 1 ? "V_p / tp = " : "V = ", V, ")");
  TRIREME_CHECK(targets.dim() == 2 && targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1),
                "GPT.loss: targets ", targets.sizes(), " must be (b, T) of logits ", logits.sizes());
  if (tp.size == 1) return cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}));
  return parallel::vocab_parallel_cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}), vocab_shard(), tp);
}

// ---- whole tensors ----

nn::NamedTensors GPT::full_state_dict() const {
  nn::NamedTensors out;
  for (const auto& [name, t] : state_dict()) {
    auto it = specs_.find(name);
    const bool split = it != specs_.end() && placement_.tp.size > 1;
    out.emplace_back(name, split ? parallel::gather_shards(t, it->second, placement_.tp.group) : t.detach());
  }
  return out;
}

void GPT::load_full_state_dict(const std::map<std::string, Tensor>& full) {
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : state_dict()) {
    auto it = full.find(name);
    TRIREME_CHECK(it != full.end(), "GPT.load_full_state_dict: no '", name, "'");
    auto spec = specs_.find(name);
    const bool split = spec != specs_.end() && placement_.tp.size > 1;
    mine[name] = split ? parallel::shard_of(it->second, spec->second) : it->second;
  }
  load_state_dict(mine);
}

// "transformer.h.7.attn.c_attn.weight" -> "transformer.h.0.attn.c_attn.weight".
namespace {
std::string as_first_block(const std::string& name) {
  const std::string prefix = "transformer.h.";
  if (name.rfind(prefix, 0) != 0) return name;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return name;
  return prefix + "0" + name.substr(dot);
}
}  // namespace

std::vector<std::vector<size_t>> block_parameter_indices(const GPT& gpt) {
  return block_parameter_indices(gpt, gpt.named_parameters());
}

std::vector<std::vector<size_t>> block_parameter_indices(const GPT& gpt, const nn::NamedTensors& among) {
  std::vector<std::vector<size_t>> units;
  for (const auto& block : gpt.blocks()) {
    std::vector<size_t>& unit = units.emplace_back();
    for (const auto& [name, p] : block->named_parameters())
      for (size_t i = 0; i < among.size(); ++i)
        if (among[i].second.same(p)) unit.push_back(i);
  }
  return units;
}

std::unique_ptr<parallel::FullyShardedParams> shard_blocks(GPT& gpt, parallel::Reducer& reducer) {
  std::vector<std::vector<Tensor>> frozen;
  for (const auto& block : gpt.blocks()) {
    std::vector<Tensor>& unit = frozen.emplace_back();
    for (const auto& [name, p] : block->named_parameters())
      if (!p.requires_grad()) unit.push_back(p);
  }
  auto sharded = std::make_unique<parallel::FullyShardedParams>(reducer, frozen);
  gpt.wrap_blocks([s = sharded.get()](size_t block, const Tensor& x, const auto& forward) {
    return s->run(block, x, forward);
  });
  return sharded;
}

parallel::ShardRule gpt_shard_rule(const GPTConfig& config, int tp) {
  if (tp == 1) return [](const std::string&, int) { return std::optional<parallel::ShardSpec>(); };
  GPTConfig one = config;
  one.n_layer = 1;
  one.dropout = 0;
  NoGradGuard no_grad;
  GPT model(one, GPTPlacement{.tp = {.group = nullptr, .size = tp, .rank = 0}}, /*seed=*/0);
  std::map<std::string, parallel::ShardSpec> specs = model.shard_specs();
  return [specs = std::move(specs)](const std::string& name, int tp_rank) -> std::optional<parallel::ShardSpec> {
    auto it = specs.find(as_first_block(name));
    if (it == specs.end()) return std::nullopt;
    parallel::ShardSpec s = it->second;
    s.rank = tp_rank;
    return s;
  };
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
