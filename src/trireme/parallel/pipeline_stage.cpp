// PipelineStage: a GPT slice under the single-process names (see pipeline_stage.h).
#include "trireme/parallel/pipeline_stage.h"

#include <cmath>

#include "trireme/core/error.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/pipeline_schedule.h"

namespace trireme::parallel {

PipelineStage::PipelineStage(const models::GPTConfig& config, const PipelineStageSpec& spec, uint64_t seed)
    : Module("PipelineStage"), config_(config), spec_(spec) {
  config_.validate();
  TRIREME_CHECK(spec.stages >= 1 && spec.rank >= 0 && spec.rank < spec.stages, "PipelineStage: rank ", spec.rank,
                " is outside [0, ", spec.stages, ")");
  TRIREME_CHECK(spec.virtual_stages >= 1, "PipelineStage: virtual_stages must be >= 1, got ", spec.virtual_stages);
  const int V = spec.stages * spec.virtual_stages;
  ranges_ = pipeline_partition(int(config_.n_layer), V, spec.layer_sizes);

  // Registration follows GPTTransformer's order (wte, wpe, drop, h, ln_f), holding only what
  // this rank's chunks need, so names and named_parameters() order match models::GPT.
  const bool first = is_first(0), last = is_last(spec.virtual_stages - 1);
  const bool tp = spec.tp.size > 1;  // Note [tensor parallelism inside stages]
  transformer = register_module("transformer", std::make_shared<nn::Module>("GPTTransformer"));
  if (first || (last && config_.tie_embeddings)) {
    if (tp) {
      tp_wte = transformer->register_module(
          "wte", std::make_shared<VocabParallelEmbedding>(config_.vocab_size, config_.d_model, spec.tp));
    } else {
      wte = transformer->register_module("wte", std::make_shared<nn::Embedding>(config_.vocab_size, config_.d_model));
    }
  }
  if (first) {
    wpe = transformer->register_module("wpe", std::make_shared<nn::Embedding>(config_.block_size, config_.d_model));
    drop = transformer->register_module("drop", std::make_shared<nn::Dropout>(config_.dropout));
  }
  auto h = transformer->register_module("h", std::make_shared<nn::Module>("LayerList"));
  for (int c = 0; c < spec.virtual_stages; ++c) {
    blocks.emplace_back();
    tp_blocks.emplace_back();
    for (int i = layers(c).begin; i < layers(c).end; ++i) {
      if (tp) {
        tp_blocks.back().push_back(
            h->register_module(std::to_string(i), std::make_shared<TensorParallelDecoderLayer>(config_, spec.tp)));
        continue;
      }
      blocks.back().push_back(h->register_module(
          std::to_string(i), std::make_shared<nn::TransformerDecoderLayer>(nn::DecoderLayerOptions{
                                 .d_model = config_.d_model,
                                 .n_head = config_.n_head,
                                 .bias = config_.bias,
                                 .dropout = config_.dropout,
                                 .ln_eps = config_.ln_eps,
                                 .gelu = config_.gelu})));
    }
  }
  if (last) {
    ln_f = transformer->register_module("ln_f", std::make_shared<nn::LayerNorm>(config_.d_model, config_.ln_eps,
                                                                                 config_.bias));
    if (!config_.tie_embeddings && tp) {
      tp_lm_head = register_module("lm_head", std::make_shared<ColumnParallelLinear>(
                                                  config_.d_model, config_.vocab_size, spec.tp,
                                                  ColumnParallelOptions{.bias = false, .pad = true}));
    } else if (!config_.tie_embeddings) {
      lm_head = register_module("lm_head", std::make_shared<nn::Linear>(config_.d_model, config_.vocab_size, false));
    }
  }
  specs_ = collect_shard_specs(*this);
  init_weights(seed);
}

std::shared_ptr<PipelineStage> PipelineStage::build(const models::GPTConfig& config, const ParallelContext& ctx,
                                                    uint64_t seed, std::vector<int> layer_sizes) {
  const ParallelLayout& layout = ctx.layout();
  const int v = schedule_kind_from_name(layout.schedule) == ScheduleKind::interleaved ? layout.virtual_stages : 1;
  return std::make_shared<PipelineStage>(
      config, PipelineStageSpec{.stages = layout.pp, .rank = ctx.pp_rank(), .virtual_stages = v,
                                .layer_sizes = std::move(layer_sizes), .tp = TpGroup::of(ctx)},
      seed);
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

// models::GPT::init_weights' rule, keyed by the same full names and with the residual scale of
// the whole model's depth (a tp shard draws its slice of the full parameter, as
// TensorParallelGPT); PipelineStage tests check that the values agree.
void PipelineStage::init_weights(uint64_t seed) {
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (ends_with(name, ".bias")) {
      nn::init_constant(p, 0.0);
    } else if (p.dim() == 1) {
      nn::init_constant(p, 1.0);
    } else {
      const double s = (ends_with(name, "attn.c_proj.weight") || ends_with(name, "mlp.c_proj.weight")) ? residual_std
                                                                                                        : std;
      auto it = specs_.find(name);
      if (it != specs_.end()) {
        init_shard_normal(p, it->second, s, seed, name);
      } else {
        nn::init_normal(p, s, seed, name);
      }
    }
  }
}

DType PipelineStage::dtype() const {
  for (const auto& [name, p] : named_parameters()) return p.dtype();
  return DType::f32;
}

nn::NamedTensors PipelineStage::full_state_dict() const {
  nn::NamedTensors out;
  for (const auto& [name, t] : state_dict()) {
    auto it = specs_.find(name);
    out.emplace_back(name, it == specs_.end() ? t.detach() : gather_shards(t, it->second, spec_.tp.group));
  }
  return out;
}

void PipelineStage::load_full_state_dict(const std::map<std::string, Tensor>& full) {
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : state_dict()) {
    auto it = full.find(name);
    TRIREME_CHECK(it != full.end(), "PipelineStage.load_full_state_dict: no '", name, "'");
    auto spec = specs_.find(name);
    mine[name] = spec == specs_.end() ? it->second : shard_of(it->second, spec->second);
  }
  load_state_dict(mine);
}

Tensor PipelineStage::forward(int chunk, const Tensor& input) {
  TRIREME_CHECK(chunk >= 0 && chunk < spec_.virtual_stages, "PipelineStage.forward: chunk ", chunk,
                " is outside [0, ", spec_.virtual_stages, ")");
  Tensor x = input;
  if (is_first(chunk)) {
    TRIREME_CHECK(x.dim() == 2 && (x.dtype() == DType::i64 || x.dtype() == DType::i32),
                  "PipelineStage.forward: the first stage takes ids (b, T) integers, got ", x.str());
    const int64_t T = x.size(1);
    TRIREME_CHECK(T >= 1 && T <= config_.block_size, "PipelineStage.forward: sequence length ", T,
                  " is outside [1, block_size = ", config_.block_size, "]");
    Tensor pos = to_device(arange(T), x.device());
    x = drop->forward((tp_wte ? tp_wte->forward(x) : wte->forward(x)) + wpe->forward(pos));
  } else {
    TRIREME_CHECK(x.dim() == 3 && x.size(2) == config_.d_model, "PipelineStage.forward: virtual stage ",
                  virtual_stage(chunk), " takes activations (b, T, ", config_.d_model, "), got ", x.str());
  }
  for (const auto& block : blocks[size_t(chunk)]) x = block->forward(x);
  for (const auto& block : tp_blocks[size_t(chunk)]) x = block->forward(x);
  if (is_last(chunk)) {
    x = ln_f->forward(x);
    if (spec_.tp.size > 1) {
      // The head is column-parallel over the vocabulary: x enters the tp region here.
      x = linear(copy_to_tp_region(x, spec_.tp), tp_lm_head ? tp_lm_head->weight : tp_wte->weight);  // (b, T, V_p / tp)
    } else {
      x = linear(x, lm_head ? lm_head->weight : wte->weight);  // (b, T, V)
    }
  }
  return x;
}

Tensor PipelineStage::loss(const Tensor& logits, const Tensor& targets) const {
  const bool tp = spec_.tp.size > 1;
  const int64_t V = tp ? round_up(config_.vocab_size, spec_.tp.size) / spec_.tp.size : config_.vocab_size;
  TRIREME_CHECK(logits.dim() == 3 && logits.size(2) == V, "PipelineStage.loss: logits ", logits.sizes(),
                " are not (b, T, ", tp ? "V_p / tp = " : "V = ", V, ")");
  TRIREME_CHECK(targets.dim() == 2 && targets.size(0) == logits.size(0) && targets.size(1) == logits.size(1),
                "PipelineStage.loss: targets ", targets.sizes(), " must be (b, T) of logits ", logits.sizes());
  if (!tp) return cross_entropy(reshape(logits, {-1, config_.vocab_size}), reshape(targets, {-1}));
  const ShardSpec& head = specs_.at(tp_lm_head ? "lm_head.weight" : "transformer.wte.weight");
  return vocab_parallel_cross_entropy(reshape(logits, {-1, V}), reshape(targets, {-1}), VocabShard::of(head), spec_.tp);
}

Tensor PipelineStage::tied_weight() const {
  if (!config_.tie_embeddings || spec_.stages == 1) return Tensor();
  // Rank 0 (embedding use) or the last rank (head use), not both; with tp, this rank's shard.
  if (tp_wte) return tp_wte->weight;
  return wte ? wte->weight : Tensor();
}

}  // namespace trireme::parallel
