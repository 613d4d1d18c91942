// cross_entropy: fused, stable log-softmax + negative log-likelihood, and its backward.
//
// Note [cross_entropy with every target ignored]
// With Reduction::mean the loss is Σ losses / (number of rows not ignored). When every row is
// ignored that count is 0; the result is then 0 (and the gradient 0), not 0/0 = NaN, so a batch
// of padding cannot poison a training run.
#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// 1 / max(count, 1), computed where count lives.
Tensor reciprocal_count(const Tensor& count) {
  return div(scalar_tensor(1.0, count.dtype(), count.device()),
             maximum(count, scalar_tensor(1.0, count.dtype(), count.device())));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  TRIREME_CHECK(logits.defined() && targets.defined(), "cross_entropy: logits or targets are undefined");
  TRIREME_CHECK(logits.dim() == 2, "cross_entropy: logits must be (N, C), got shape ", logits.sizes());
  TRIREME_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating, got ", logits.dtype());
  TRIREME_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                "cross_entropy: targets must be i64 or i32, got ", targets.dtype(), " with shape ", targets.sizes());
  TRIREME_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: targets of shape ",
                targets.sizes(), " do not match logits ", logits.sizes(), " (expected [", logits.size(0), "])");
  TRIREME_CHECK(targets.device() == logits.device(), "cross_entropy: targets are on ", targets.device(),
                " but logits on ", logits.device());
  TRIREME_CHECK(logits.size(1) > 0 || logits.size(0) == 0, "cross_entropy: logits ", logits.sizes(), " have no classes");
  const int64_t n = logits.size(0);
  Tensor xc = contiguous(logits.detach()), tc = contiguous(targets.detach());
  const DType sd = stat_dtype(logits.dtype());
  // Under autocast a loss is f32; 16-bit logits are read as they are (Note [autocast policy]).
  const DType out_dtype = autocast_f32_result(logits) ? DType::f32 : logits.dtype();
  Tensor losses = Tensor::empty({n}, sd, logits.device());
  Tensor lse = Tensor::empty({n}, sd, logits.device());
  Tensor count = Tensor::empty({}, sd, logits.device());  // stays on the device: no host sync
  find_kernel<CrossEntropyKernel>("cross_entropy", logits.device(), logits.dtype())(xc, tc, ignore_index, losses, lse,
                                                                                   count);
  Tensor out;
  Tensor row_scale;  // d out / d losses[r] for rows not ignored: a 0-dim tensor, or undefined for 1
  {
    NoGradGuard no_grad;
    if (reduction == Reduction::none) {
      out = to_dtype(losses, out_dtype);
    } else {
      // See Note [cross_entropy with every target ignored]: a count of 0 divides a sum of 0 by 1.
      if (reduction == Reduction::mean) row_scale = reciprocal_count(count);
      out = to_dtype(row_scale.defined() ? sum(losses) * row_scale : sum(losses), out_dtype);
    }
  }
  if (any_requires_grad({&logits})) {
    record("cross_entropy", {&logits}, {&out},
           [=, sx = SavedTensor(xc), st = SavedTensor(tc)](const TensorList& g) -> TensorList {
             const Tensor& xv = sx.unpack("cross_entropy");
             Tensor gl = Tensor::empty(xv.sizes(), xv.dtype(), xv.device());
             // A scalar gradient (times 1/count for the mean) is broadcast over the rows by a
             // stride-0 view.
             Tensor g0 = to_dtype(g[0], sd);
             if (row_scale.defined()) g0 = g0 * row_scale;
             Tensor gr = g0.dim() == 0 ? g0.alias({n}, {0}, g0.offset()) : g0;
             find_kernel<CrossEntropyBackwardKernel>("cross_entropy_backward", xv.device(), xv.dtype())(
                 xv, st.unpack("cross_entropy"), lse, gr, ignore_index, gl);
             return {gl};
           });
  }
  return out;
}

}  // namespace trireme
