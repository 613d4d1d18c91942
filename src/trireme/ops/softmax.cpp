// softmax and log_softmax along any dim, with their backwards. Kernels work on the last dim of a
// contiguous tensor; another dim is moved last (transpose + contiguous) and moved back.
#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Runs a last-dim kernel along `dim` of same-shaped inputs; no autograd.
template <class Run>
Tensor along_dim(int64_t dim, int64_t last, const Tensor& a, const Tensor& b, Run run) {
  NoGradGuard no_grad;
  if (dim == last) {
    Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
    run(contiguous(a.detach()), b.defined() ? contiguous(b.detach()) : Tensor(), out);
    return out;
  }
  Tensor at = contiguous(transpose(a.detach(), dim, last));
  Tensor bt = b.defined() ? contiguous(transpose(b.detach(), dim, last)) : Tensor();
  Tensor out = Tensor::empty(at.sizes(), a.dtype(), a.device());
  run(at, bt, out);
  return contiguous(transpose(out, dim, last));
}

Tensor softmax_impl(const char* op, const char* backward_op, const Tensor& x, int64_t dim) {
  TRIREME_CHECK(x.defined(), op, ": the input is undefined");
  TRIREME_CHECK(is_floating(x.dtype()), op, ": needs a floating input, got ", x.dtype(), " with shape ", x.sizes());
  if (x.dim() == 0) return reshape(softmax_impl(op, backward_op, reshape(x, {1}), 0), {});
  const int64_t d = wrap_dim(dim, x.dim(), op), last = x.dim() - 1;
  auto kernel = find_kernel<SoftmaxKernel>(op, x.device(), x.dtype());
  Tensor y = along_dim(d, last, x, Tensor(), [&](const Tensor& xc, const Tensor&, Tensor& out) { kernel(xc, out); });
  if (any_requires_grad({&x})) {
    record(op, {&x}, {&y}, [d, last, op, backward_op, sy = SavedTensor(y)](const TensorList& g) -> TensorList {
      const Tensor& yv = sy.unpack(op);
      auto bk = find_kernel<SoftmaxBackwardKernel>(backward_op, yv.device(), yv.dtype());
      return {along_dim(d, last, g[0], yv, [&](const Tensor& gc, const Tensor& yc, Tensor& out) { bk(gc, yc, out); })};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (auto c = autocast_f32_args({x})) return softmax((*c)[0], dim);
  return softmax_impl("softmax", "softmax_backward", x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (auto c = autocast_f32_args({x})) return log_softmax((*c)[0], dim);
  return softmax_impl("log_softmax", "log_softmax_backward", x, dim);
}

}  // namespace trireme
