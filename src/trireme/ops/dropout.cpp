// dropout: inverted dropout with a counter-based mask, so any slice of a tensor can reproduce
// its part of the mask from (seed, stream, offset + its row-major position) alone.
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

// The mask applied to any tensor of x's shape (x itself forward, its gradient backward: the
// derivative of x * mask / (1 - p) is the same mask and scale).
Tensor apply_mask(const Tensor& t, double p, uint64_t seed, uint64_t stream, uint64_t offset) {
  Tensor tc = contiguous(t.detach());
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<DropoutKernel>("dropout", t.device(), t.dtype())(tc, p, seed, stream, offset, out);
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, uint64_t offset) {
  TRIREME_CHECK(x.defined(), "dropout: the input is undefined");
  TRIREME_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  TRIREME_CHECK(is_floating(x.dtype()), "dropout: needs a floating input, got ", x.dtype(), " with shape ",
                x.sizes());
  if (!training || p == 0.0) return x;
  Tensor y = apply_mask(x, p, seed, stream, offset);
  if (any_requires_grad({&x})) {
    record("dropout", {&x}, {&y}, [=](const TensorList& g) -> TensorList {
      return {apply_mask(g[0], p, seed, stream, offset)};
    });
  }
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  TRIREME_CHECK(x.defined(), "dropout: the input is undefined");
  TRIREME_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;  // draws nothing: eval steps leave the generator alone
  const uint64_t offset = gen.reserve(uint64_t(x.numel()));
  return dropout(x, p, training, gen.seed(), gen.stream(), offset);
}

}  // namespace trireme
