// The two linear layers of sequence parallelism with their collectives fused in, so that each
// collective runs beside the GEMMs that do not need it (Note [split by source rows]).
#pragma once

#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/process_group.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::parallel {

// Note [split by source rows]
// Under sequence parallelism (Note [sequence parallelism], models/gpt_block.h) a column-parallel layer
// needs every rank's rows of its input (an all-gather) and a row-parallel layer's backward needs
// every rank's rows of its output gradient (an all-gather too). Done as "gather, then one GEMM"
// the GEMM waits for the whole gather. But row block q of a product depends only on row block q
// of its left operand, so the GEMM can start on this rank's own rows, which are already here,
// and take the other ranks' rows once they arrive: the gather runs beside the first GEMM (with
// the copy-engine collectives of Note [peer all-reduce] it takes no SMs from it). Each block
// is written straight into its rows of one output, so nothing is joined afterwards.
// The row-parallel forward is the mirror image, split by destination rows: row block q of its
// product is what rank q keeps of the reduce-scatter, so with a group that sends chunks early
// (Note [staged reduce-scatter], dist/process_group.h) it computes the other ranks' blocks
// first, each leaving as soon as it is written, and this rank's own block while they travel:
// only the final sum waits. The backward of the column-parallel layer reduce-scatters its input
// gradient beside its weight-gradient GEMM, as the replicated path's all-reduce does.

// x_rows (n/tp, in): this rank's rows -> (n, out_local) = gather(x_rows) W_rᵀ + b_r.
// Backward: the input gradient reduce-scattered back to rows; W_r and b_r as a linear's.
Tensor sp_column_parallel_linear(const Tensor& x_rows, const Tensor& weight, const Tensor& bias, const TpGroup& tp);

// x (n, in_local) -> this rank's rows (n/tp, out) of the sum over tp of x W_rᵀ, plus the bias
// (replicated, may be undefined), plus `residual` (this rank's rows of a residual stream, may be
// undefined: the sub-layer's skip connection, when nothing comes between, such as dropout),
// started: wait `work` before reading them. The GEMM is split by
// destination rows: the other ranks' rows first, each sent as soon as it is written (Note
// [staged reduce-scatter]), this rank's own while they travel; where the group can, the bias and
// the residual are added in the reduce-scatter's own pass (one elementwise pass fewer per
// sub-layer; a residual of another dtype, as under autocast, takes a separate add). Backward: the output gradient's rows gathered, split
// by source rows; the bias gradient is this rank's rows' part (summed over tp by the caller).
//
// `low_rank` (may be empty) adds u bᵀ to the partial sum before it is reduce-scattered: a LoRA
// adapter's share of the row-parallel layer (parallel/lora.h), summed over tp with the GEMM's
// output and so costing no collective of its own. Its backward reads the output gradient's rows
// as they arrive for the GEMM's: du = g b (whole, every row) and db = gᵀ u, this rank's part
// (u differs by rank; the caller sums b's gradient over tp, as the bias's).
struct LowRankTerm {
  Tensor u;  // (n, r): every rank's rows
  Tensor b;  // (out, r)
  bool defined() const { return u.defined(); }
};
Tensor sp_row_parallel_linear_start(const Tensor& x, const Tensor& weight, const Tensor& bias, const TpGroup& tp,
                                    dist::WorkPtr& work, const Tensor& residual = Tensor(),
                                    const LowRankTerm& low_rank = {});

}  // namespace trireme::parallel
