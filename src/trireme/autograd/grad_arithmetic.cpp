#include "trireme/autograd/grad_arithmetic.h"

#include "trireme/kernels/amp.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::autograd {
namespace {

void check_same(const char* what, const Tensor& a, const Tensor& b) {
  TRIREME_CHECK(a.device() == b.device() && a.dtype() == b.dtype() && a.sizes() == b.sizes(), what, ": gradients ",
                a.str(), " and ", b.str(), " must have one shape, dtype and device");
}

// Whether `narrow` is a 16-bit gradient on its way into the f32 `wide` one.
bool widens_into(const Tensor& wide, const Tensor& narrow) {
  return widened_on_accumulation(wide.dtype(), narrow.dtype()) && wide.device() == narrow.device() &&
         wide.sizes() == narrow.sizes();
}

}  // namespace

bool widened_on_accumulation(DType leaf, DType grad) {
  return leaf == DType::f32 && (grad == DType::bf16 || grad == DType::f16);
}

Tensor grad_ones_like(const Tensor& t) {
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<FillKernel>("fill", out.device(), out.dtype())(out, 1.0);
  return out;
}

Tensor grad_sum(const Tensor& a, const Tensor& b, const char* what) {
  if (widens_into(a, b) || widens_into(b, a)) {
    // A copy of the wide one with the narrow one widened into it: no f32 copy of the narrow one
    // exists beside the sum (a tied embedding's head gradient meets its lookup's: 2 + 4 + 4 bytes
    // an element at once, where a cast and an add would hold 4 + 4 + 4 and the 2 they cast).
    const bool b_narrow = widens_into(a, b);
    Tensor out = grad_copy(b_narrow ? a : b, DType::f32);
    grad_accumulate(out, b_narrow ? b : a);
    return out;
  }
  check_same(what, a, b);
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  find_kernel<BinaryKernel>("add", a.device(), a.dtype())(a, b, out);
  return out;
}

void grad_accumulate(Tensor& acc, const Tensor& incoming) {
  const bool widening = widens_into(acc, incoming);
  if (widening && acc.is_contiguous() && incoming.is_contiguous()) {
    find_kernel<AccumulateWideningKernel>("accumulate_widening", acc.device(), incoming.dtype())(acc, incoming);
  } else {
    const Tensor same = widening ? grad_copy(incoming, acc.dtype()) : incoming;
    check_same("AccumulateGrad", acc, same);
    find_kernel<BinaryKernel>("add", acc.device(), acc.dtype())(acc, same, acc);
  }
  acc.bump_version();
}

Tensor grad_copy(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.sizes(), dtype, t.device());
  find_kernel<CopyKernel>("copy", out.device(), out.dtype())(t, out);
  return out;
}

}  // namespace trireme::autograd
