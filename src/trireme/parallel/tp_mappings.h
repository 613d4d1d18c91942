// The autograd-aware collectives of tensor parallelism, as conjugate pairs: each op's backward is
// the other op's forward, so a layer that enters a tensor-parallel region with one leaves it with
// its partner and the gradients come out right.
//
//   op                       forward                      backward
//   copy_to_tp_region        identity                     all-reduce (sum) over tp
//   reduce_from_tp_region    all-reduce (sum) over tp     identity
//   scatter_to_tp_region     keep my chunk of the last dim all-gather along the last dim
//   gather_from_tp_region    all-gather along the last dim keep my chunk of the last dim
//
// Why copy_to_tp_region's backward is an all-reduce: its input X is replicated on every rank and
// feeds rank r's shard of a column-parallel layer, Y_r = X A_r. The loss depends on X through
// every rank's Y_r, so dL/dX = sum_r dL/dY_r A_rᵀ: each rank computes one term and the sum is an
// all-reduce. reduce_from_tp_region is its transpose: Y = sum_r Y_r, so dL/dY_r = dL/dY on every
// rank, with no communication.
//
//   TpGroup tp = TpGroup::of(ctx);                 // my tensor-parallel group, size and rank
//   Tensor x_in = copy_to_tp_region(x, tp);        // entering: x (B, T, d) replicated
//   Tensor y = reduce_from_tp_region(partial, tp); // leaving: partial sums -> the full result
//
// With size 1 (or no group) every op is the identity and records nothing.
#pragma once

#include <functional>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/process_group.h"

namespace trireme::parallel {

class ParallelContext;

// A tensor-parallel group as the layers see it. `group` may be null only when size == 1 (or in
// tests that build one rank's shards without communicating: then a collective is an error).
struct TpGroup {
  dist::ProcessGroup* group = nullptr;
  int size = 1;
  int rank = 0;
  static TpGroup of(const ParallelContext& ctx);
  static TpGroup single() { return {}; }
};

Tensor copy_to_tp_region(const Tensor& x, const TpGroup& tp);
Tensor reduce_from_tp_region(const Tensor& x, const TpGroup& tp);
// The same for an x that nothing else holds (a linear's fresh output): reduced in place, without
// the copy that reduce_from_tp_region makes to leave its input alone.
Tensor reduce_from_tp_region_owned(const Tensor& x, const TpGroup& tp);
// reduce_from_tp_region_owned without the wait: the all-reduce is started and `work` must be
// waited for before the result is read (with size 1, work stays null).
Tensor start_reduce_from_tp_region_owned(const Tensor& x, const TpGroup& tp, dist::WorkPtr& work);
// x (..., n) replicated -> (..., n / size): this rank's chunk of the last dim.
Tensor scatter_to_tp_region(const Tensor& x, const TpGroup& tp);
// x (..., m) -> (..., m * size): every rank's chunk concatenated along the last dim in rank order.
Tensor gather_from_tp_region(const Tensor& x, const TpGroup& tp);

// Sequence parallelism's conjugate pair (Note [sequence parallelism], models/gpt_block.h), over the rows
// (first dim) of a contiguous tensor, rank r's rows being [r n/size, (r+1) n/size):
// x (n/size, ...) -> (n, ...) every rank's rows in rank order; backward: the gradient summed
// over the group and this rank's rows kept (reduce-scatter).
Tensor gather_rows_from_sp(const Tensor& x, const TpGroup& tp);
// x (n, ...) partial sums -> (n/size, ...) this rank's rows of the sum over the group; backward:
// the gradient's rows gathered from every rank. n must be divisible by the group size.
// (The layers' own gathers and scatters are fused into their GEMMs: parallel/sp_linear.h.)
Tensor reduce_scatter_rows_to_sp(const Tensor& x, const TpGroup& tp);
// Replicated parameters used on a rank's rows only (layer norms, biases, position embeddings
// under sequence parallelism) get partial gradients: the aliases returned here (same values)
// sum their gradients over the group in one all-reduce, in the backward, before the gradients
// reach the parameters (and any data-parallel reducer's hooks). Undefined tensors pass through.
std::vector<Tensor> sum_grads_over_tp(const std::vector<Tensor>& params, const TpGroup& tp);
// The same sum done later, once, on the parameters' accumulated .grad (in place; a gradient that
// did not arrive on this rank counts as zeros): for a model that left its partial gradients
// unsummed in the backward (models::GPT::defer_grad_sums). One all-reduce for all of them
// instead of one per layer, each of which held the backward up (Note [deferred gradient sums]).
void sum_partial_grads_over_tp(const std::vector<Tensor>& params, const TpGroup& tp);

// In place: t = sum over the tp group (no autograd). For layers and losses that reduce
// statistics (max, sum of exponentials) inside their own forward.
void tp_all_reduce_(const Tensor& t, const TpGroup& tp, dist::ReduceOp op = dist::ReduceOp::sum);

// The backward of copy_to_tp_region for a column-parallel linear that enters the region itself:
// a linear grad-input hook (ops/linalg.h) that all-reduces the input gradient in place,
// asynchronously, and waits for it once the weight gradient is queued (ColumnParallelLinear).
std::function<std::function<void()>(Tensor&)> tp_grad_input_all_reduce(const TpGroup& tp);

}  // namespace trireme::parallel
