// vocab_parallel_cross_entropy (declared in tp_layers.h): the loss of the full-vocabulary softmax
// from each rank's slice of the logits, on fused kernels (kernels/nn.h, "vocab_*").
//
// With M_r the global row max and S_r = Σ_j exp(x_rj - M_r) over every rank's real columns:
//   loss_r = log S_r - (x_rt - M_r)      (t the target; the owning rank contributes x_rt - M_r)
//   d loss / d x_rj = (exp(x_rj - lse_r) - [j == t]) * g_r,   lse_r = M_r + log S_r
// Two all-reduces of N numbers (max, then the pair of sums) and none in the backward. The saved
// state is the logits (alive anyway as the LM head's output) and lse: nothing of size N x V in f32.
#include <limits>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/tp_layers.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::parallel {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const VocabShard& shard,
                                    const TpGroup& tp, int64_t ignore_index) {
  const char* op = "vocab_parallel_cross_entropy";
  TRIREME_CHECK(logits.defined() && targets.defined(), op, ": logits or targets are undefined");
  TRIREME_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": logits ",
                logits.sizes(), " must be (N, V_local) and targets ", targets.sizes(), " (N)");
  TRIREME_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32, op, ": targets must be integers, got ",
                targets.str());
  TRIREME_CHECK(is_floating(logits.dtype()), op, ": logits must be floating, got ", logits.dtype());
  TRIREME_CHECK(targets.device() == logits.device(), op, ": targets are on ", targets.device(), " but logits on ",
                logits.device());
  TRIREME_CHECK(shard.real >= 0 && shard.real <= logits.size(1), op, ": ", shard.real, " real columns of ",
                logits.sizes());
  const int64_t n = logits.size(0);
  const Device dev = logits.device();
  const DType sd = stat_dtype(logits.dtype());
  Tensor x = contiguous(logits.detach()), t = contiguous(targets.detach());
  Tensor lse, row_scale_base, loss;
  {
    NoGradGuard no_grad;
    Tensor row_max = Tensor::empty({n}, sd, dev);
    find_kernel<VocabRowMaxKernel>("vocab_row_max", dev, x.dtype())(x, shard.real, row_max);
    tp_all_reduce_(row_max, tp, dist::ReduceOp::max);
    Tensor stats = Tensor::empty({2, n}, sd, dev);  // [Σ exp(x - M); x_t - M]: one all-reduce for both
    find_kernel<VocabRowStatsKernel>("vocab_row_stats", dev, x.dtype())(x, t, shard.start, shard.real,
                                                                        shard.vocab_size, ignore_index, row_max, stats);
    tp_all_reduce_(stats, tp, dist::ReduceOp::sum);
    Tensor sum_exp = squeeze(narrow(stats, 0, 0, 1), 0), target_shifted = squeeze(narrow(stats, 0, 1, 1), 0);
    Tensor log_sum_exp = log(sum_exp);
    // The kernels shift an all -inf row by 0 instead of -inf; lse follows them.
    Tensor no_max = eq(row_max, scalar_tensor(-std::numeric_limits<double>::infinity(), sd, dev));
    Tensor finite_max = where(no_max, zeros_like(row_max), row_max);
    lse = finite_max + log_sum_exp;
    Tensor valid = to_dtype(ne(to_dtype(t, DType::i64), scalar_tensor(double(ignore_index), DType::i64, dev)), sd);
    // The number of counted targets stays a tensor (no host sync on a GPU); clamped to 1 so that a
    // batch with every target ignored has loss 0 and gradient 0.
    Tensor count = maximum(sum(valid), scalar_tensor(1.0, sd, dev));
    row_scale_base = valid / count;  // d loss / d per-row loss
    loss = sum((log_sum_exp - target_shifted) * valid) / count;
  }
  // Under autocast a loss is f32; 16-bit logits are read as they are (Note [autocast policy]).
  loss = to_dtype(loss, autocast_f32_result(logits) ? DType::f32 : logits.dtype());
  if (any_requires_grad({&logits})) {
    record(op, {&logits}, {&loss},
           [x_saved = SavedTensor(x), t, lse, row_scale_base, shard, sd](const TensorList& g) -> TensorList {
             const Tensor& xv = x_saved.unpack("vocab_parallel_cross_entropy");
             Tensor grad_row = row_scale_base * to_dtype(g[0], sd);
             Tensor gl = Tensor::empty(xv.sizes(), xv.dtype(), xv.device());
             find_kernel<VocabGradKernel>("vocab_grad", xv.device(), xv.dtype())(xv, t, shard.start, shard.real, lse,
                                                                                 grad_row, gl);
             return {gl};
           });
  }
  return loss;
}

}  // namespace trireme::parallel
