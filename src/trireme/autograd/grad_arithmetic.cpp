#include "trireme/autograd/grad_arithmetic.h"

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::autograd {
namespace {

void check_same(const char* what, const Tensor& a, const Tensor& b) {
  TRIREME_CHECK(a.device() == b.device() && a.dtype() == b.dtype() && a.sizes() == b.sizes(), what, ": gradients ",
                a.str(), " and ", b.str(), " must have one shape, dtype and device");
}

}  // namespace

Tensor grad_ones_like(const Tensor& t) {
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<FillKernel>("fill", out.device(), out.dtype())(out, 1.0);
  return out;
}

Tensor grad_sum(const Tensor& a, const Tensor& b, const char* what) {
  check_same(what, a, b);
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  find_kernel<BinaryKernel>("add", a.device(), a.dtype())(a, b, out);
  return out;
}

void grad_accumulate(Tensor& acc, const Tensor& incoming) {
  check_same("AccumulateGrad", acc, incoming);
  find_kernel<BinaryKernel>("add", acc.device(), acc.dtype())(acc, incoming, acc);
  acc.bump_version();
}

Tensor grad_copy(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.sizes(), dtype, t.device());
  find_kernel<CopyKernel>("copy", out.device(), out.dtype())(t, out);
  return out;
}

}  // namespace trireme::autograd
