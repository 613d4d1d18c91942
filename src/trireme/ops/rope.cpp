// rotary_embedding: rotates interleaved pairs of the head dim by position-dependent angles
// (formula in kernels/cpu/rope.cpp); the backward rotates the gradient back.
#include "trireme/autograd/node.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::TensorList;

namespace {

Tensor rotate(const Tensor& t, double base, int64_t position_offset, bool inverse) {
  Tensor tc = t.stride(-1) == 1 ? t.detach() : contiguous(t.detach());
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<RotaryKernel>("rotary_embedding", t.device(), t.dtype())(tc, base, position_offset, inverse, out);
  return out;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, double base, int64_t position_offset) {
  TRIREME_CHECK(x.defined(), "rotary_embedding: the input is undefined");
  TRIREME_CHECK(x.dim() == 4, "rotary_embedding: x must be (B, H, T, hd), got shape ", x.sizes());
  TRIREME_CHECK(x.size(3) % 2 == 0, "rotary_embedding: the head dim must be even, got shape ", x.sizes());
  TRIREME_CHECK(is_floating(x.dtype()), "rotary_embedding: needs a floating input, got ", x.dtype());
  TRIREME_CHECK(base > 0, "rotary_embedding: base must be positive, got ", base);
  TRIREME_CHECK(position_offset >= 0, "rotary_embedding: position_offset must be non-negative, got ", position_offset);
  Tensor y = rotate(x, base, position_offset, false);
  if (any_requires_grad({&x})) {
    record("rotary_embedding", {&x}, {&y}, [=](const TensorList& g) -> TensorList {
      return {rotate(g[0], base, position_offset, true)};
    });
  }
  return y;
}

}  // namespace trireme
