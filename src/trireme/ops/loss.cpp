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
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  if (auto c = autocast_f32_args({logits})) return cross_entropy((*c)[0], targets, ignore_index, reduction);
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
  Tensor losses = Tensor::empty({n}, sd, logits.device());
  Tensor lse = Tensor::empty({n}, sd, logits.device());
  const int64_t count =
      find_kernel<CrossEntropyKernel>("cross_entropy", logits.device(), logits.dtype())(xc, tc, ignore_index, losses, lse);

  Tensor out;
  double scale = 1.0;  // d out / d losses[r] for rows not ignored
  {
    NoGradGuard no_grad;
    if (reduction == Reduction::none) {
      out = to_dtype(losses, logits.dtype());
    } else {
      // See Note [cross_entropy with every target ignored].
      if (reduction == Reduction::mean) scale = count > 0 ? 1.0 / double(count) : 0.0;
      out = to_dtype(mul(sum(losses), scale), logits.dtype());
    }
  }
  if (any_requires_grad({&logits})) {
    record("cross_entropy", {&logits}, {&out},
           [=, sx = SavedTensor(xc), st = SavedTensor(tc)](const TensorList& g) -> TensorList {
             const Tensor& xv = sx.unpack("cross_entropy");
             Tensor gl = Tensor::empty(xv.sizes(), xv.dtype(), xv.device());
             // A scalar gradient is broadcast over the rows by a stride-0 view.
             Tensor gr = g[0].dim() == 0 ? g[0].alias({n}, {0}, g[0].offset()) : g[0];
             find_kernel<CrossEntropyBackwardKernel>("cross_entropy_backward", xv.device(), xv.dtype())(
                 xv, st.unpack("cross_entropy"), lse, gr, scale, ignore_index, gl);
             return {gl};
           });
  }
  return out;
}

}  // namespace trireme
