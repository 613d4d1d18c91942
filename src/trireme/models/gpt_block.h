// The GPT's decoder block, written once for every layout: its linear layers take the layout's
// tensor-parallel group, and with a group of size 1 they are plain linear layers.
//
//   x = x + attn(ln_1(x))       attn.c_attn  ColumnParallelLinear(d, 3d, blocks = 3): rank r holds
//   x = x + mlp(ln_2(x))                     its heads' q | k | v rows
//                               attn.c_proj  RowParallelLinear(d, d): one all-reduce forward, one backward
//                               mlp.c_fc     ColumnParallelLinear(d, 4d)
//                               mlp.c_proj   RowParallelLinear(4d, d): one all-reduce forward, one backward
//                               ln_1, ln_2   replicated (their inputs are replicated)
// (Megatron-LM's split, parallel/tp_layers.h). n_head must be divisible by the group's size.
//
// Note [sequence parallelism]
// Between the tensor-parallel regions (the layer norms, residual adds, dropouts and the
// row-parallel biases) every rank of the group holds the same (B, T, d) activations and does the
// same work, which does not shrink as tp grows. Under sequence parallelism each rank holds only
// its rows (tokens) [r n/tp, (r+1) n/tp) of the n = B T rows there, and the regions' all-reduces
// split in two (Megatron-LM's sequence parallelism, over flattened tokens):
//   LN(x_r) -> all-gather rows -> column-parallel ... row-parallel GEMM -> reduce-scatter rows
//   -> + bias -> dropout -> + x_r
// The same bytes move (an all-reduce is a reduce-scatter then an all-gather). The gathers are
// fused into the GEMMs that need them, which start on this rank's rows while the others' arrive
// (parallel/sp_linear.h, Note [split by source rows]): the column-parallel layers' inputs in the
// forward, the row-parallel layers' output gradients in the backward; the column-parallel input
// gradient is reduce-scattered beside its weight-gradient GEMM. Parameters used on a rank's rows
// only (layer norms, row-parallel biases, the position embedding) get partial gradients, summed
// over tp (parallel::sum_grads_over_tp) before any data-parallel hook sees them.
//
// Note [GPT architectures]
// GPTConfig::arch picks what each piece of the same block structure is; names, splits over tp
// and the sequence-parallel path are shared:
//                 gpt2 (GPT-2)                          llama (Llama, Qwen2)
//   ln_1, ln_2    LayerNorm                             RMSNorm (GPTNorm)
//   attention     c_attn: fused q | k | v, n_head each  q_proj (n_head) and kv_proj: k | v of
//                 learned positions (transformer.wpe)   n_kv_head heads each (grouped-query: head
//                                                       h reads kv head h / (n_head / n_kv_head));
//                                                       rotary embeddings on q and k, interleaved
//                                                       pairs (ops rotary_embedding, base rope_theta)
//   mlp           c_fc (d -> ffn), GELU, c_proj         c_fc: fused gate | up (d -> 2 ffn),
//                                                       silu(gate) * up, c_proj (ffn -> d); no biases
// Under tp a rank holds whole q heads and whole kv heads (kv_proj split per k/v block), so tp
// must divide n_kv_head as well as n_head: the kv heads are split, never replicated. A Hugging
// Face Llama/Qwen2 checkpoint rotates halves (rotate_half) rather than pairs; the import
// permutes q_proj's and k_proj's rows per head so that the two agree (train/hf_checkpoint.h).
//
//   GPTBlock block(config, tp);
//   Tensor y = block.forward(x);                  // (B, T, d) replicated over tp
//   Tensor y_rows = block.forward_sp(x_rows, B, T);  // this rank's rows (B T / tp, d)
#pragma once

#include <memory>
#include <vector>

#include "trireme/models/gpt_norm.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/elementwise.h"
#include "trireme/parallel/tp_layers.h"

namespace trireme::models {

struct GPTConfig;

// A sub-layer's output whose tensor-parallel sum is still running (RowParallelLinear::start).
struct PendingSum {
  Tensor partial;
  dist::WorkPtr work;
};

class GPTAttention : public nn::Module {
 public:
  GPTAttention(const GPTConfig& config, parallel::TpGroup tp);
  Tensor forward(const Tensor& x);  // (B, T, d) replicated -> (B, T, d) replicated
  // forward = finish(start(x)), with other work free to run between (RowParallelLinear::start).
  PendingSum start(const Tensor& x);
  Tensor finish(PendingSum& pending);
  // Sequence parallelism: x_rows is this rank's rows (B T / tp, d) of the layer norm's output;
  // the pending sum is this rank's rows of c_proj's output plus proj_bias (c_proj's bias as the
  // caller sums its gradient over tp; may be undefined) plus residual (the skip connection's
  // rows, added in the sum's pass; may be undefined). adapter_a: the A of the column layers'
  // LoRA adapters (c_attn or q_proj, then kv_proj; undefined where none) as the caller sums
  // their gradients over tp (parallel/lora.h).
  PendingSum start_sp(const Tensor& x_rows, int64_t B, int64_t T, const Tensor& proj_bias,
                      const std::vector<Tensor>& adapter_a, const Tensor& residual = Tensor());

  bool llama;
  int64_t d_model, n_head, n_head_local, n_kv_head_local;
  double rope_theta;
  std::shared_ptr<parallel::ColumnParallelLinear> c_attn;   // gpt2: d -> 3d, this rank's q | k | v columns
  std::shared_ptr<parallel::ColumnParallelLinear> q_proj;   // llama: d -> d, this rank's q heads
  std::shared_ptr<parallel::ColumnParallelLinear> kv_proj;  // llama: d -> 2 kv_d, this rank's k | v heads
  std::shared_ptr<parallel::RowParallelLinear> c_proj;      // d -> d
  std::shared_ptr<nn::Dropout> resid_dropout;

 private:
  // qkv (B, T, 3C) -> attention -> c_proj's output, being summed (sp: reduce-scattered to rows).
  PendingSum attend(const Tensor& qkv, bool sp, const Tensor& proj_bias, const Tensor& residual = Tensor());
  // qkv (B, T, C + 2 C_kv): this rank's q | k | v columns -> its heads' attention, (B, T, C).
  Tensor attention(const Tensor& qkv) const;
  // The projection to q | k | v as one weight and bias (llama: q_proj's and kv_proj's joined).
  Tensor qkv_weight() const;
  Tensor qkv_bias() const;
};

class GPTMLP : public nn::Module {
 public:
  GPTMLP(const GPTConfig& config, parallel::TpGroup tp);
  Tensor forward(const Tensor& x);
  PendingSum start(const Tensor& x);
  Tensor finish(PendingSum& pending);
  PendingSum start_sp(const Tensor& x_rows, const Tensor& proj_bias, const Tensor& adapter_a,
                      const Tensor& residual = Tensor());  // as GPTAttention::start_sp (adapter_a: c_fc's)

  bool swiglu;
  GeluApprox gelu_approx;
  // Selective recomputation: c_proj keeps the activation's input (c_fc's output), not its output.
  bool recompute_activation = false;
  std::shared_ptr<parallel::ColumnParallelLinear> c_fc;  // d -> ffn (llama: gate | up, 2 ffn)
  std::shared_ptr<parallel::RowParallelLinear> c_proj;   // ffn -> d
  std::shared_ptr<nn::Dropout> dropout;

 private:
  Tensor activation(const Tensor& h) const;  // c_fc's output -> c_proj's input
  // activation(u), marked for selective recomputation when `recompute`.
  Tensor activation_recomputed_if(bool recompute, const Tensor& u) const;
};

class GPTBlock : public nn::Module {
 public:
  GPTBlock(const GPTConfig& config, parallel::TpGroup tp);
  Tensor forward(const Tensor& x);
  // The block under sequence parallelism: x is this rank's rows (B T / tp, d) of the (B, T, d)
  // activations, and so is the result. sum_grads: sum the partial gradients of the layer norms
  // and row-parallel biases over tp in the backward (false: the model sums them after it,
  // Note [deferred gradient sums] in gpt.h).
  Tensor forward_sp(const Tensor& x, int64_t B, int64_t T, bool sum_grads = true);
  // The parameters whose gradients are partial over tp under sequence parallelism: ln_1, ln_2
  // (weight, bias), the row-parallel biases (attn, mlp), and the column layers' LoRA A
  // (attn.c_attn or attn.q_proj, attn.kv_proj, mlp.c_fc); undefined where a block has none.
  std::vector<Tensor> partial_grad_params() const;
  // Selective recomputation (autograd::recompute_when_saved): the GEMMs after the layer norms and
  // GELU keep those functions' inputs, and the backward computes their outputs again (the
  // layer norms' only off the sequence-parallel path, where an all-gather sits between).
  void set_selective_recompute(bool on) { selective_recompute_ = on, mlp->recompute_activation = on; }

  std::shared_ptr<GPTNorm> ln_1;
  std::shared_ptr<GPTAttention> attn;
  std::shared_ptr<GPTNorm> ln_2;
  std::shared_ptr<GPTMLP> mlp;

 private:
  Tensor norm(const GPTNorm& ln, const Tensor& x) const;
  bool selective_recompute_ = false;
};

}  // namespace trireme::models
