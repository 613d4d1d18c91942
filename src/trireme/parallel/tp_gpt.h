// TensorParallelGPT: models::GPT with its attention heads, MLP and vocabulary split over the
// tensor-parallel ranks (Megatron-style), under the single-process parameter names.
//
// Per block, as the single-process GPT but:
//   attn.c_attn   ColumnParallelLinear(d, 3d, blocks = 3): rank r holds its heads' q | k | v rows
//   attn.c_proj   RowParallelLinear(d, d)            -> one all-reduce forward, one backward
//   mlp.c_fc      ColumnParallelLinear(d, 4d)
//   mlp.c_proj    RowParallelLinear(4d, d)           -> one all-reduce forward, one backward
//   ln_1, ln_2    replicated (their inputs are replicated)
// and transformer.wte is a VocabParallelEmbedding; the head (tied to wte, or lm_head) gives each
// rank its vocabulary slice of the logits, and loss() is vocab_parallel_cross_entropy, so the
// full (B, T, V) logits never exist. n_head must be divisible by tp; a vocabulary that tp does not
// divide is padded with zero rows that never win and never change the loss.
//
// Note [sequence parallelism]
// Between the tensor-parallel regions (the layer norms, residual adds, dropouts and the
// row-parallel biases) every rank holds the same (B, T, d) activations and does the same work:
// at tp=2 on GPT 1.3B that work does not halve and is most of what keeps rank 0's shard from
// half of one GPU's step. With ParallelLayout::sequence_parallel each rank
// holds only its rows (tokens) [r n/tp, (r+1) n/tp) of the n = B T rows there, and the
// regions' all-reduces split in two (Megatron-LM's sequence parallelism, over flattened tokens):
//   LN(x_r) -> all-gather rows -> column-parallel ... row-parallel GEMM -> reduce-scatter rows
//   -> + bias -> dropout -> + x_r
// The same bytes move (an all-reduce is a reduce-scatter then an all-gather). The gathers are
// fused into the GEMMs that need them, which start on this rank's rows while the others' arrive
// (parallel/sp_linear.h, Note [split by source rows]): the column-parallel layers' inputs in the
// forward, the row-parallel layers' output gradients in the backward; the column-parallel
// input gradient is reduce-scattered beside its weight-gradient GEMM. Parameters used on a rank's rows only (layer norms,
// row-parallel biases, the position embedding) get partial gradients; sum_grads_over_tp sums
// each layer's in one all-reduce inside the backward, before any data-parallel hook sees them.
// Dropout draws each token's element from its place in the global batch (a GlobalRowScope in
// token rows), so the masks are the single process's. The embedding's lookup is reduce-
// scattered straight into rows; the head gathers the final rows and is unchanged.
// It applies when tp > 1 and tp divides B T, and (for dropout's counter) either the model is
// not drawing or the caller gave a GlobalRowScope; otherwise the replicated path runs.
//
// Every shard is initialised as its slice of the single-process GPT's parameter (same seed,
// same names), so before the first step the model equals models::GPT(config, seed) whatever the
// layout. Dropout layers sit on replicated tensors (after the row-parallel all-reduces), where
// every tp rank draws the single-process mask from the same (seed, name, counter).
//
//   ParallelContext ctx(world, {.tp = 2});
//   auto gpt = std::make_shared<TensorParallelGPT>(cfg, ctx, /*seed=*/1337);
//   Tensor loss = gpt->loss(ids, targets);          // the same value on every tp rank
//   loss.backward();
//   nn::NamedTensors full = gpt->full_state_dict();  // collective over tp: single-process tensors
//   gpt->load_full_state_dict(full);                 // each rank takes its slices
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>

#include "trireme/models/gpt.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/embedding.h"
#include "trireme/nn/layer_list.h"
#include "trireme/nn/layer_norm.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/tp_layers.h"

namespace trireme::parallel {

// A sub-layer's output whose tensor-parallel sum is still running (RowParallelLinear::start).
struct PendingSum {
  Tensor partial;
  dist::WorkPtr work;
};

class TensorParallelAttention : public nn::Module {
 public:
  TensorParallelAttention(int64_t d_model, int64_t n_head, bool bias, double dropout, TpGroup tp);
  Tensor forward(const Tensor& x);  // (B, T, d) replicated -> (B, T, d) replicated
  // forward = finish(start(x)), with other work free to run between (RowParallelLinear::start).
  PendingSum start(const Tensor& x);
  Tensor finish(PendingSum& pending);
  // Sequence parallelism: x_rows is this rank's rows (B T / tp, d) of the layer norm's output;
  // the pending sum is this rank's rows of c_proj's output plus proj_bias (c_proj's bias as the
  // caller sums its gradient over tp; may be undefined) plus residual (the skip connection's
  // rows, added in the sum's pass; may be undefined).
  PendingSum start_sp(const Tensor& x_rows, int64_t B, int64_t T, const Tensor& proj_bias,
                      const Tensor& residual = Tensor());

  int64_t d_model, n_head, n_head_local;
  std::shared_ptr<ColumnParallelLinear> c_attn;  // d -> 3d, this rank's q | k | v columns
  std::shared_ptr<RowParallelLinear> c_proj;     // d -> d
  std::shared_ptr<nn::Dropout> resid_dropout;

 private:
  // qkv (B, T, 3C) -> attention -> c_proj's output, being summed (sp: reduce-scattered to rows).
  PendingSum attend(const Tensor& qkv, bool sp, const Tensor& proj_bias, const Tensor& residual = Tensor());
  // qkv (B, T, 3C): this rank's q | k | v columns -> its heads' attention, (B, T, C).
  Tensor attention(const Tensor& qkv) const;
};

class TensorParallelMLP : public nn::Module {
 public:
  TensorParallelMLP(int64_t d_model, bool bias, double dropout, GeluApprox gelu, TpGroup tp);
  Tensor forward(const Tensor& x);
  PendingSum start(const Tensor& x);
  Tensor finish(PendingSum& pending);
  PendingSum start_sp(const Tensor& x_rows, const Tensor& proj_bias,
                      const Tensor& residual = Tensor());  // as TensorParallelAttention::start_sp

  GeluApprox gelu_approx;
  std::shared_ptr<ColumnParallelLinear> c_fc;  // d -> 4d
  std::shared_ptr<RowParallelLinear> c_proj;   // 4d -> d
  std::shared_ptr<nn::Dropout> dropout;
};

class TensorParallelDecoderLayer : public nn::Module {
 public:
  TensorParallelDecoderLayer(const models::GPTConfig& config, TpGroup tp);
  Tensor forward(const Tensor& x);
  // The layer under sequence parallelism (Note [sequence parallelism]): x is this rank's rows
  // (B T / tp, d) of the (B, T, d) activations, and so is the result.
  // sum_grads: sum the partial gradients of the layer norms and row-parallel biases over tp in
  // the backward (false: the model sums them after it, Note [deferred gradient sums]).
  Tensor forward_sp(const Tensor& x, int64_t B, int64_t T, bool sum_grads = true);
  // The parameters whose gradients are partial over tp under sequence parallelism.
  std::vector<Tensor> partial_grad_params() const;

  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<TensorParallelAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_2;
  std::shared_ptr<TensorParallelMLP> mlp;
};

class TensorParallelTransformer : public nn::Module {
 public:
  TensorParallelTransformer(const models::GPTConfig& config, TpGroup tp);
  std::shared_ptr<VocabParallelEmbedding> wte;
  std::shared_ptr<nn::Embedding> wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::LayerList> h;  // of TensorParallelDecoderLayer
  std::shared_ptr<nn::LayerNorm> ln_f;
};

class TensorParallelGPT : public nn::Module {
 public:
  TensorParallelGPT(const models::GPTConfig& config, const ParallelContext& ctx, uint64_t seed = 0);
  // For tests and tools that build one rank's shards without a process group (no forward then).
  TensorParallelGPT(const models::GPTConfig& config, TpGroup tp, uint64_t seed = 0);

  // ids (B, T) -> this rank's vocabulary slice of the logits (B, T, V_p / tp), padding columns
  // included (see vocab_shard()).
  Tensor forward_local_logits(const Tensor& ids);
  // Mean cross-entropy over the full vocabulary; targets == -100 are ignored. Same on every tp rank.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // GPT-2 initialisation exactly as models::GPT::init_weights, each shard its slice.
  void init_weights(uint64_t seed);
  void reset_parameters(uint64_t seed) override { init_weights(seed); }

  const models::GPTConfig& config() const { return config_; }
  const TpGroup& tp() const { return tp_; }
  const Tensor& lm_head_weight() const;
  VocabShard vocab_shard() const;
  // The ShardSpec of every sharded parameter by name (absent: replicated over tp).
  const std::map<std::string, ShardSpec>& shard_specs() const { return specs_; }

  // Note [deferred gradient sums]
  // Under sequence parallelism the layer norms, the row-parallel biases and the position
  // embedding see only this rank's token rows, so their gradients are partial sums over tp. By
  // default each layer's are summed inside the backward, in one all-reduce that the backward
  // waits for (on 2 H200s: 25 waits of ~27 us a step, GPT 1.3B). With defer_grad_sums(true) the
  // backward leaves them partial and sum_deferred_grads() sums them all in one all-reduce, which
  // the caller runs once after the backward (after gradient accumulation and after any data-
  // parallel Reducer's finish(): both are linear, so the order does not change the sum) and
  // before reading the gradients. The parallel trainer does so unless ZeRO shards the gradients.
  // A step whose forwards did not all take the sequence-parallel path is refused there.
  void defer_grad_sums(bool defer) { defer_grad_sums_ = defer; }
  bool defers_grad_sums() const { return defer_grad_sums_; }
  void sum_deferred_grads();

  // Every parameter whole, under its single-process name (a collective over tp: all ranks call it).
  nn::NamedTensors full_state_dict() const;
  // Loads single-process tensors (a models::GPT state dict): each rank copies in its slices.
  void load_full_state_dict(const std::map<std::string, Tensor>& full);

  std::shared_ptr<TensorParallelTransformer> transformer;
  std::shared_ptr<ColumnParallelLinear> lm_head;  // untied only: (V_p / tp, d), padded, no bias

 private:
  void build(uint64_t seed);
  Tensor blocks(const Tensor& x);              // the decoder layers, one after another
  bool dropout_can_split_rows() const;         // may a forward's rows be split (dropout's counter)?
  // ids (B, T) -> the final layer norm's output (B, T, d), gathered, computed under sequence
  // parallelism; nullopt when it does not apply (then the replicated path runs).
  std::optional<Tensor> sequence_parallel_hidden(const Tensor& ids);

  models::GPTConfig config_;
  TpGroup tp_;
  std::map<std::string, ShardSpec> specs_;
  models::PositionCache positions_;
  bool defer_grad_sums_ = false;
  // Forwards since the last sum_deferred_grads() whose gradients are partial (the sequence-
  // parallel path with deferral) and whose gradients are whole (the replicated path).
  int partial_forwards_ = 0, whole_forwards_ = 0;
};

}  // namespace trireme::parallel
