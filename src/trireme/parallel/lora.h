// LoRA (low-rank adaptation): a frozen linear layer y = W x + b learns only
//   y = W x + b + scale · B (A dropout(x)),   A (r, in), B (out, r), scale = alpha / r,
// with A drawn like a linear weight (uniform ±1/sqrt(in), keyed by its name) and B zero, so that
// the adapted model starts as the base model. The adapter rides on the tensor-parallel layer it
// adapts, cut the way that layer is cut:
//
//   column-parallel (W split by output rows): A replicated, B split by output rows (per block,
//     as W). u = A x is the same on every rank; it enters the tp region through
//     copy_to_tp_region, whose backward sums dL/du = Σ_r B_rᵀ dL/dy_r over the group: so A's
//     gradient and the adapter's share of dL/dx are whole on every rank (one all-reduce of
//     B·T·r numbers in the backward).
//   row-parallel (W split by input columns, x arriving split): A split by input columns, B
//     replicated. B (A_r x_r) is added to the layer's partial sum before its reduce (the sum is
//     linear, so the forward needs no collective of its own); B's gradient on a rank is then
//     partial, and is summed over the group in the backward (sum_grads_over_tp: one all-reduce
//     of out·r numbers).
//
// Under sequence parallelism (Note [sequence parallelism], models/gpt_block.h) the same cuts
// join the layers' sequence-parallel path (parallel/sp_linear.h):
//   column-parallel: the layer's input is this rank's token rows x_q. u_q = A x_q is computed on
//     those rows alone and u's rows gathered over tp (n·r numbers, against the n·in of the
//     input's own gather, which stays fused into the base GEMM); its backward reduce-scatters
//     dL/du, summing Σ_r B_rᵀ dL/dy_r as the replicated path's all-reduce does. A's gradient on a
//     rank then covers its rows only: A is summed over tp like the layer norms' weights (the
//     caller passes the alias it sums, GPTBlock::partial_grad_params).
//   row-parallel: the input is every row, this rank's columns; u = A_r x_r (n, r) and B join
//     the layer's partial sum as a low-rank term (LowRankTerm) before its reduce-scatter, so the
//     forward needs no collective of its own; B's gradient is partial and summed over the group
//     in the backward, as on the replicated path.
//
// Dropout on the adapter's input draws the single process's mask (tp_dropout for a shard of
// columns), keyed by the adapter's name as nn::Dropout is (Note [dropout keyed by global sample]).
//
//   parallel::LoraOptions o{.rank = 8, .alpha = 16};
//   layer->add_lora(o);                       // ColumnParallelLinear or RowParallelLinear
//   layer->lora->A, layer->lora->B;           // the trainable parameters, "<layer>.lora.A" / ".B"
#pragma once

#include <optional>

#include "trireme/parallel/sp_linear.h"
#include "trireme/parallel/tp_layers.h"

namespace trireme::parallel {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;
  uint64_t seed = 0;  // A's initialisation, keyed by the adapter's name (nn/init.h)
  double scale() const { return alpha / double(rank); }
};

class LoraAdapter : public TensorParallelModule {
 public:
  enum class Cut { column, row };
  // in, out: the adapted layer's full features; out_blocks: its output blocks (fused q|k|v: 3).
  LoraAdapter(int64_t in_features, int64_t out_features, TpGroup tp, Cut cut, LoraOptions options,
              int64_t out_blocks = 1, DType dtype = DType::f32);

  // Column cut: x (..., in) replicated -> (..., out_local), this rank's rows of scale · B A x.
  // Row cut: x (..., in_local) this rank's columns -> (..., out), this rank's partial sum of it.
  Tensor forward(const Tensor& x);
  // Sequence parallelism, column cut: x_rows (n/tp, in) this rank's token rows -> (n, out_local),
  // every row's scale · B_r A x. `a` is A, or the alias through which the caller sums A's
  // gradient over tp (sum_grads_over_tp, or later: GPT::defer_grad_sums).
  Tensor forward_sp_column(const Tensor& x_rows, const Tensor& a);
  // Sequence parallelism, row cut: x (n, in_local) every token row, this rank's columns -> the
  // term u Bᵀ (u = scale · A_r x, (n, r)) that sp_row_parallel_linear_start adds to its partial
  // sum. Inside the sequence-parallel forward's GlobalRowScope, which counts from this rank's
  // first token row.
  LowRankTerm sp_row_term(const Tensor& x);
  // A uniform ±1/sqrt(in) (kaiming-uniform with a = sqrt(5), as nn::Linear), B zero.
  void reset_parameters(uint64_t seed) override;
  // This rank's slice of scale · B A, shaped as the adapted layer's weight slice (what a merge
  // adds to it).
  Tensor weight_delta() const;

  int64_t in_features, out_features;
  TpGroup tp;
  Cut cut;
  LoraOptions options;
  Tensor A;  // (r, in) or, row cut, (r, in_local)
  Tensor B;  // (out, r) or, column cut, (out_local, r)

 private:
  // x after the adapter's dropout; x's rows are the global batch's from first_row on (a
  // GlobalRowScope's count, nullopt outside any scope).
  Tensor dropped(const Tensor& x, std::optional<int64_t> first_row);
};

}  // namespace trireme::parallel
