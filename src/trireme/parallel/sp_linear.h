// The two linear layers of sequence parallelism with their collectives fused in, so that each
// collective runs beside the GEMMs that do not need it (Note [split by source rows]).
#pragma once

#include <functional>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/process_group.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::parallel {

// Note [split by source rows]
// Under sequence parallelism (Note [sequence parallelism], tp_gpt.h) a column-parallel layer
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
Tensor sp_row_parallel_linear_start(const Tensor& x, const Tensor& weight, const Tensor& bias, const TpGroup& tp,
                                    dist::WorkPtr& work, const Tensor& residual = Tensor());

// Note [attention by destination rows]
// The attention projection's reduce-scatter could not hide behind its own GEMM: this rank's
// block of that GEMM (in = d/tp columns) is shorter than the other ranks' blocks' trip, so the
// sum waited for them (session 6 timeline: 14-24 waits of 35-47 us a step). But a token's row of
// attention's output depends only on its own sequence, so when the batch divides over the ranks
// (row block q of the rows is sequences [q B/tp, (q+1) B/tp)), attention itself can run block by
// block in the row-parallel GEMM's order: the other ranks' sequences first, their projection
// rows sent as soon as written, then this rank's sequences' attention and projection while they
// travel. So the QKV projection hands out its output as row blocks (each block's gradient comes
// back from its own attention), and the projection takes its input block by block from a
// callback. Measured on 2 H200s (GPT 1.3B, bench/gpu/RESULTS.md, session 7): 1.5 ms a step
// slower at first (flash kernels over half the batch have longer tails), equal once the flash
// grids ran their heaviest tiles first (76.36 against 76.43 ms). So TensorParallelAttention uses
// it only with TRIREME_SP_ATTENTION_BLOCKS=1 (an experiment switch; layouts tp2.sp.attnblocks,
// tp4.sp.attnblocks).
// The same as sp_column_parallel_linear, its output handed out as tp row blocks (rank q's rows
// of out, (n/tp, out_local) each, separate autograd outputs).
std::vector<Tensor> sp_column_parallel_linear_blocks(const Tensor& x_rows, const Tensor& weight, const Tensor& bias,
                                                     const TpGroup& tp);
// The same as sp_row_parallel_linear_start, its input's row block q ((rows, in_local)) produced
// by x_block(q), called once per block in the order the GEMMs need them (the other ranks' first,
// this rank's last) with grad mode as the caller has it; x_block must not use the group.
Tensor sp_row_parallel_linear_start_by_blocks(const std::function<Tensor(int)>& x_block, int64_t rows,
                                              const Tensor& weight, const Tensor& bias, const TpGroup& tp,
                                              dist::WorkPtr& work, const Tensor& residual = Tensor());

}  // namespace trireme::parallel
