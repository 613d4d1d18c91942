// GPT: the GPT-2 architecture (learned token and position embeddings, pre-LN decoder blocks,
// a final LayerNorm, a language-model head tied to the token embedding or separate), or with
// arch llama the Llama/Qwen2 one (RMSNorm, rotary positions, SwiGLU, grouped-query attention;
// Note [GPT architectures] in gpt_block.h), defined once. Every parallel layout is a view of this one class: the layout's tensor-parallel group
// splits each block's heads and MLP and the vocabulary (Megatron-style; size 1 is the plain
// model), sequence parallelism shards the activations between those splits by tokens, and a
// pipeline stage holds a contiguous slice of the blocks (plus the embeddings on the first stage,
// the final norm and head on the last). Whatever the layout, parameters keep their
// single-process names and are initialised as their slices of the single-process values, so
// every layout starts from, and checkpoints as, the same model.
//
// Parameter names follow Hugging Face's GPT2LMHeadModel, so checkpoints map one to one:
//   transformer.wte.weight              (V, d)
//   transformer.wpe.weight              (block_size, d)
//   transformer.h.<i>.ln_1.{weight,bias}
//   transformer.h.<i>.attn.c_attn.{weight,bias}   weight (3d, d), rows q | k | v
//   transformer.h.<i>.attn.c_proj.{weight,bias}   weight (d, d)
//   transformer.h.<i>.ln_2.{weight,bias}
//   transformer.h.<i>.mlp.c_fc.{weight,bias}      weight (4d, d)
//   transformer.h.<i>.mlp.c_proj.{weight,bias}    weight (d, 4d)
//   transformer.ln_f.{weight,bias}
//   lm_head.weight                      (V, d), only when the head is not tied
// arch llama has no wpe, no biases but the optional q/k/v ones, and in place of c_attn and c_fc:
//   transformer.h.<i>.attn.q_proj.{weight,bias}   weight (d, d)
//   transformer.h.<i>.attn.kv_proj.{weight,bias}  weight (2 kv_d, d), rows k | v, kv_d = n_kv_head d / n_head
//   transformer.h.<i>.mlp.c_fc.weight             (2 ffn, d), rows gate | up
//   transformer.h.<i>.mlp.c_proj.weight           (d, ffn)
// (models/gpt_hf.h maps both to and from Hugging Face's names.)
// Under tensor parallelism a rank holds its slice of the split ones (ShardSpec, parallel/shard.h):
// c_attn and c_fc by output rows (c_attn per q/k/v block), the c_proj weights by input columns,
// wte and lm_head by vocabulary rows, padded to a multiple of tp with zero rows that never win
// and never change the loss.
//
//   models::GPTConfig cfg{.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
//   models::GPT gpt(cfg, /*seed=*/1337);             // the whole model in this process
//   Tensor logits = gpt.forward(ids);                // ids (B, T) i64 -> (B, T, V)
//   Tensor loss = gpt.loss(ids, targets);            // scalar mean cross-entropy
//
//   models::GPT mine(cfg, ctx, 1337);                // this rank's part of ctx's layout (tp, sp, pp)
//   Tensor loss = mine.loss(ids, targets);           // one stage: the same value on every tp rank
//   nn::NamedTensors full = mine.full_state_dict();  // collective over tp: single-process tensors
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trireme/models/gpt_block.h"
#include "trireme/models/gpt_norm.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/embedding.h"
#include "trireme/nn/layer_norm.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/elementwise.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/lora.h"
#include "trireme/parallel/pipeline_model.h"
#include "trireme/parallel/pipeline_partition.h"
#include "trireme/parallel/tp_layers.h"

namespace trireme::models {

// The two architectures of the one GPT (Note [GPT architectures] in gpt_block.h).
enum class GPTArch { gpt2, llama };

struct GPTConfig {
  GPTArch arch = GPTArch::gpt2;
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  double dropout = 0.0;
  bool bias = true;            // biases in Linear layers and LayerNorms
  bool tie_embeddings = true;  // lm_head shares transformer.wte.weight
  double ln_eps = 1e-5;         // the norms' epsilon (LayerNorm or RMSNorm)
  GeluApprox gelu = GeluApprox::tanh;
  int64_t ffn = 0;              // the MLP's hidden width; 0: 4 d_model
  // arch llama only:
  int64_t n_kv_head = 0;        // key/value heads, a divisor of n_head (grouped-query attention); 0: n_head
  double rope_theta = 10000.0;  // the rotary embedding's base
  bool qkv_bias = false;        // biases on q, k and v (Qwen2)
  // Note [classifier head]: > 0 puts a head over this many classes where the language-model head
  // was; 0 is the language model.
  int64_t num_classes = 0;

  int64_t kv_heads() const { return arch == GPTArch::llama && n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * d_model; }

  // Throws trireme::Error naming the first bad field and its value.
  void validate() const;
  // The closed-form count of parameter elements (tied weights counted once).
  int64_t num_parameters() const;
};

// The norm of `config`'s architecture: LayerNorm (gpt2) or RMSNorm (llama).
std::shared_ptr<GPTNorm> gpt_norm(const GPTConfig& config);

// How this process holds the GPT: the layout's view of it.
struct GPTPlacement {
  parallel::TpGroup tp;                  // splits each block and the vocabulary (size 1: whole)
  bool sequence_parallel = false;        // Note [sequence parallelism] (gpt_block.h): tp > 1, one stage
  parallel::PipelinePosition pipeline;   // the stage(s) held
  std::vector<int> layer_sizes;          // blocks per virtual stage in order; empty: balanced

  // This rank's placement in ctx's layout (virtual stages only under the interleaved schedule).
  static GPTPlacement of(const parallel::ParallelContext& ctx, std::vector<int> layer_sizes = {});
};

// The container of the body, so names read "transformer.h.0...." as in Hugging Face. Members are
// null where this process does not hold them (pipeline stages).
class GPTTransformer : public nn::Module {
 public:
  GPTTransformer() : Module("GPTTransformer") {}
  std::shared_ptr<parallel::VocabParallelEmbedding> wte;
  std::shared_ptr<nn::Embedding> wpe;  // gpt2 only (llama's positions are rotary)
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Module> h;  // the blocks held, under their model-wide indices
  std::shared_ptr<GPTNorm> ln_f;
};

// The positions 0 .. T-1 (i64) on a device, made on first use and kept while T and the device
// stay the same: arange on the host copied to a GPU in every forward would synchronise the host
// with the GPU at the start of every step, so it could never queue a step ahead.
class PositionCache {
 public:
  const Tensor& get(int64_t T, Device device);
  // The positions of token rows [first, first + count) of a batch of length-T sequences laid out
  // one after another ((first + i) mod T): a sequence-parallel rank's rows.
  const Tensor& rows(int64_t first, int64_t count, int64_t T, Device device);

 private:
  Tensor positions_;
  Tensor rows_;
  int64_t rows_first_ = -1, rows_T_ = -1;
};

class GPT : public parallel::PipelineModel {
 public:
  // The whole model in this process.
  explicit GPT(const GPTConfig& config, uint64_t seed = 0);
  // This rank's part of ctx's layout; `layer_sizes` as in GPTPlacement.
  GPT(const GPTConfig& config, const parallel::ParallelContext& ctx, uint64_t seed,
      std::vector<int> layer_sizes = {});
  // Any placement; with a tp group whose `group` is null, the shards of one rank for tools and
  // tests that need no communication (forward then fails at the first collective).
  GPT(const GPTConfig& config, const GPTPlacement& placement, uint64_t seed);

  // With one stage held: ids (B, T) integer, T <= block_size -> logits (B, T, V); under tensor
  // parallelism this rank's vocabulary slice (B, T, V_p / tp), padding columns included.
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) over the full vocabulary; targets == -100 are ignored.
  // The same value on every tp rank.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // PipelineModel: chunk c of a pipeline rank (forward(ids) is chunk 0 of a single stage).
  const parallel::PipelinePosition& pipeline() const override { return placement_.pipeline; }
  Tensor forward_chunk(int chunk, const Tensor& input) override;
  Tensor loss_of(const Tensor& logits, const Tensor& targets) const override;
  int64_t hidden_size() const override { return config_.d_model; }
  DType activation_dtype() const override;
  // Note [pipeline tied embeddings].
  Tensor tied_weight() const override;
  const parallel::TpGroup& tp() const override { return placement_.tp; }
  const std::map<std::string, parallel::ShardSpec>& shard_specs() const override { return specs_; }

  // GPT-2 initialisation, by parameter name and layout-independent (nn/init.h): weights N(0, 0.02),
  // residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LN
  // weights 1; a shard draws its slice of the full parameter.
  void init_weights(uint64_t seed);
  // nn::init_parameters(gpt, seed) runs the layers' defaults first and this last: GPT-2's scheme.
  void reset_parameters(uint64_t seed) override { init_weights(seed); }

  const GPTConfig& config() const { return config_; }
  const GPTPlacement& placement() const { return placement_; }
  // The head's weight (transformer.wte.weight when tied), on the last stage.
  const Tensor& lm_head_weight() const;
  // The vocabulary range of this rank's logits.
  parallel::VocabShard vocab_shard() const;
  // The blocks of chunk `chunk` (model-wide indices layers(chunk)).
  const std::vector<std::shared_ptr<GPTBlock>>& blocks(int chunk = 0) const { return blocks_.at(size_t(chunk)); }
  parallel::StageLayers layers(int chunk = 0) const;

  // Activation recomputation (autograd/checkpoint.h, nn/checkpoint.h): under `full` the first
  // `layers` blocks of each chunk (all of them when layers < 0) run as checkpointed regions,
  // each keeping only its input while the step goes on and running its forward again inside the
  // backward. Dropout replays its masks, so the values are those without recomputation.
  // Under `selective` the blocks keep the GEMM outputs and recompute only their layer norms' and
  // GELU's outputs inside the backward (GPTBlock::set_selective_recompute): cheap work, a third
  // of a block's activations.
  enum class Recompute { none, selective, full };
  void set_recompute(Recompute mode, int64_t layers = -1);

  // Runs each block held as wrap(i, x, forward), i its index among the blocks of its chunk, which
  // must return forward(x): what a layout does around each block (ZeRO-3 gathers the block's
  // parameters for it, parallel/fully_sharded.h). `forward` is already the checkpointed region
  // when the block is recomputed, so the wrapper's work stays outside the replay.
  using BlockWrapper =
      std::function<Tensor(size_t block, const Tensor& x, const std::function<Tensor(const Tensor&)>& forward)>;
  void wrap_blocks(BlockWrapper wrap) { wrap_ = std::move(wrap); }

  // Note [deferred gradient sums]
  // Under sequence parallelism the layer norms, the row-parallel biases and the position
  // embedding see only this rank's token rows, so their gradients are partial sums over tp. By
  // default each layer's are summed inside the backward, in one all-reduce that the backward
  // waits for. With defer_grad_sums(true) the backward leaves them partial and
  // sum_deferred_grads() sums them all in one all-reduce, which the caller runs once after the
  // backward (after gradient accumulation and after any data-parallel Reducer's finish(): both
  // are linear, so the order does not change the sum) and before reading the gradients. The
  // trainer does so unless ZeRO shards the gradients. A step whose forwards did not all take the
  // sequence-parallel path is refused there.
  void defer_grad_sums(bool defer) { defer_grad_sums_ = defer; }
  bool defers_grad_sums() const { return defer_grad_sums_; }
  void sum_deferred_grads();

  // LoRA (parallel/lora.h, models/lora.h): adapters on the named layers of every block held
  // ("attn.c_proj", "mlp.c_fc", ...; "all": every linear layer of the blocks), and every other
  // parameter frozen (requires_grad false). Not under sequence parallelism.
  void add_lora(const parallel::LoraOptions& options, const std::vector<std::string>& targets);
  bool has_lora() const { return has_lora_; }

  // Every parameter held, whole, under its single-process name (a collective over tp).
  nn::NamedTensors full_state_dict() const;
  // Loads the held parameters from single-process tensors (a superset is fine, a missing one is
  // an error naming it): each rank copies in its slices.
  void load_full_state_dict(const std::map<std::string, Tensor>& full);

  std::shared_ptr<GPTTransformer> transformer;
  std::shared_ptr<parallel::ColumnParallelLinear> lm_head;  // untied head on the last stage, (V_p / tp, d)
  std::shared_ptr<nn::Linear> classifier;  // Note [classifier head]: on the last stage, (num_classes, d), whole

 private:
  // Splitting a forward's rows (batch slices, sequence-parallel tokens) needs dropout's counter
  // from the caller's GlobalRowScope when dropout draws.
  bool dropout_can_split_rows() const;
  // ids (B, T) -> the final layer norm's output (B, T, d), gathered, computed under sequence
  // parallelism; nullopt when it does not apply (then the replicated path runs).
  std::optional<Tensor> sequence_parallel_hidden(const Tensor& ids);
  Tensor head(const Tensor& hidden) const;  // the final norm's output -> this rank's logits
  // The i-th block of a chunk on x through `forward`, as a checkpointed region when recomputed.
  Tensor run_block(size_t i, const std::shared_ptr<GPTBlock>& block, const Tensor& x,
                   std::function<Tensor(const Tensor&)> forward) const;

  GPTConfig config_;
  GPTPlacement placement_;
  std::vector<parallel::StageLayers> ranges_;              // per virtual stage
  std::vector<std::vector<std::shared_ptr<GPTBlock>>> blocks_;  // per chunk of this rank
  std::map<std::string, parallel::ShardSpec> specs_;
  PositionCache positions_;
  bool defer_grad_sums_ = false;
  bool has_lora_ = false;
  Recompute recompute_ = Recompute::none;
  int64_t recompute_layers_ = -1;
  BlockWrapper wrap_;
  // Forwards since the last sum_deferred_grads() whose gradients are partial (the sequence-
  // parallel path with deferral) and whose gradients are whole (the replicated path).
  int partial_forwards_ = 0, whole_forwards_ = 0;
};

// Note [classifier head]
// With config.num_classes = C > 0 the model is a sequence classifier (finetune.task = "classify"):
// the last stage holds `classifier` (C, d) with a bias, named "classifier.weight" and
// "classifier.bias", in place of the language-model head (and, the head not being tied, holds no
// copy of the token embedding). Its logits are (B, T, C) at every position, and a target is a
// class index at the one position per text that is classified (its last token) and -100
// elsewhere, so the loss is the same masked mean cross-entropy as supervised fine-tuning's and a
// classifier trains through every layout's step as the language model does. The head is small and
// not split: every tp rank holds it whole, computes the same logits from the same (replicated)
// final-norm output, and so gets the whole gradient of the head and of its input with no sum over
// tp; data parallelism averages the head's gradient like any other parameter's. Under sequence
// parallelism the final norm's rows are gathered with a backward that keeps this rank's rows of
// that (whole) gradient rather than summing the ranks' copies.

// Note [pipeline tied embeddings]
// GPT ties the head to transformer.wte.weight. When the first and last virtual stages are on
// different ranks, each holds its own copy of that weight under the same name and with the same
// initial value (initialisation is keyed by name, nn/init.h). After backward the two copies'
// gradients are summed between those two ranks (parallel::PipelineExecutor does it), which is
// exactly the single process's gradient of the shared weight; the optimizers, fed identical
// gradients and states, then keep the copies identical. A checkpoint takes the weight from rank
// 0. With tensor parallelism each copy is a vocabulary shard, and the sum pairs the shards of the
// same tp rank (the pipeline group of a rank holds the ranks with its dp and tp coordinates).

// The parameters of each block `gpt` holds (chunk 0), as indices into gpt.named_parameters():
// ZeRO-3's units.
std::vector<std::vector<size_t>> block_parameter_indices(const GPT& gpt);
// The same as indices into `among` (the parameters a Reducer takes: with LoRA, those that train),
// leaving out a block's parameters that are not there.
std::vector<std::vector<size_t>> block_parameter_indices(const GPT& gpt, const nn::NamedTensors& among);
// ZeRO-3: `reducer`'s units (built with zero = 3 and units = block_parameter_indices(gpt, the
// Reducer's parameters)) become sharded parameters, and every block runs gathered (wrap_blocks).
// A block's parameters that do not train (LoRA's frozen base weights), which the Reducer does not
// hold, are sharded beside them (FullyShardedParams). The result must outlive the model's
// forwards and backwards.
std::unique_ptr<parallel::FullyShardedParams> shard_blocks(GPT& gpt, parallel::Reducer& reducer);

// The sharding of `config`'s parameters over `tp` ranks, by single-process name, read off a
// one-block model (every block is cut alike): for reassembling optimizer state written by
// another layout (parallel/optimizer_reshard.h).
parallel::ShardRule gpt_shard_rule(const GPTConfig& config, int tp);

// Note [Hugging Face GPT-2 checkpoints]
// Hugging Face stores c_attn, c_proj and c_fc as Conv1D, whose weight is (in, out): the
// transpose of trireme's Linear (out, in). GPT2Model checkpoints (e.g. the hub's "gpt2") omit
// the "transformer." prefix and lm_head; GPT2LMHeadModel ones have both. Older files carry the
// causal-mask buffers "attn.bias" / "attn.masked_bias", which are not parameters.

// True for the names whose Hugging Face tensors are Conv1D weights, stored transposed.
bool gpt_hf_is_conv1d(const std::string& name);
// Converts a Hugging Face GPT-2 state dict (either naming) to trireme's names and layouts: adds
// the "transformer." prefix where missing, transposes Conv1D weights, drops the mask buffers,
// and drops lm_head.weight when `tie_embeddings` (it is wte).
std::map<std::string, Tensor> gpt_state_dict_from_hf(const std::map<std::string, Tensor>& hf,
                                                     bool tie_embeddings = true);
// The reverse, in GPT2LMHeadModel naming; with a tied head, lm_head.weight is written as a copy
// of wte so that GPT2LMHeadModel.from_pretrained finds it.
std::map<std::string, Tensor> gpt_state_dict_to_hf(const nn::NamedTensors& ours, bool tie_embeddings = true);

}  // namespace trireme::models
