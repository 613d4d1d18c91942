// Copies and conversions. Gradients flow through dtype and device conversions (converted back).
#include "trireme/ops/copy.h"

#include "trireme/autograd/checkpoint.h"
#include "trireme/autograd/grad_arithmetic.h"
#include "trireme/autograd/node.h"
#include "trireme/core/device_copy.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/elementwise.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::TensorList;

namespace {
void copy_kernel(const Tensor& src, Tensor& dst) {
  find_kernel<CopyKernel>("copy", dst.device(), dst.dtype())(src, dst);
}
}  // namespace

Tensor clone(const Tensor& t) {
  TRIREME_CHECK(t.defined(), "clone: the input is undefined");
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
  copy_kernel(t, out);
  if (any_requires_grad({&t})) record("clone", {&t}, {&out}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  return out;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

namespace {
// The backward of a cast: the gradient cast back to the input's dtype, except for a 16-bit cast of
// an f32 leaf (a weight under autocast): its gradient goes to the leaf as it is, and the leaf's
// accumulator widens it as it adds it into .grad (autograd/grad_arithmetic.h). With micro-batches
// that is one pass over each weight's gradient instead of a cast and an add: a kernel launch and
// a round trip of an f32 gradient through memory fewer per weight and micro-batch, the same bits.
void record_cast(const Tensor& t, Tensor& out) {
  if (any_requires_grad({&t}) && is_floating(out.dtype())) {
    const bool leaf_widens = t.is_leaf() && autograd::widened_on_accumulation(t.dtype(), out.dtype());
    record("to_dtype", {&t}, {&out}, [from = t.dtype(), leaf_widens](const TensorList& g) -> TensorList {
      return {leaf_widens ? g[0] : to_dtype(g[0], from)};
    });
  }
}
}  // namespace

Tensor to_dtype(const Tensor& t, DType dtype) {
  TRIREME_CHECK(t.defined(), "to_dtype: the input is undefined");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.sizes(), dtype, t.device());
  copy_kernel(t, out);
  record_cast(t, out);
  // A cast of a recomputed tensor (autocast's before a GEMM) is recomputed too.
  if (auto recipe = autograd::recompute_recipe(t)) {
    autograd::set_recompute_recipe(out, [recipe = std::move(recipe), dtype] { return to_dtype(recipe(), dtype); });
  }
  return out;
}

Tensor to_dtype_reusing(const Tensor& t, const Tensor& cast) {
  TRIREME_CHECK(t.defined() && cast.defined() && t.sizes() == cast.sizes() && t.device() == cast.device(),
                "to_dtype_reusing: the cast must be of the tensor's shape and device");
  Tensor out = cast.detach();
  record_cast(t, out);
  return out;
}

Tensor to_device(const Tensor& t, Device device, bool non_blocking) {
  TRIREME_CHECK(t.defined(), "to_device: the input is undefined");
  if (t.device() == device) return t;
  TRIREME_CHECK(device_copy_fn() != nullptr, "to_device: cannot copy from ", t.device(), " to ", device,
                ": this build has no backend for that device");
  Tensor src = contiguous(t.detach());
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), device);
  device_copy_fn()(src, out, non_blocking);
  if (any_requires_grad({&t})) {
    record("to_device", {&t}, {&out}, [from = t.device()](const TensorList& g) -> TensorList { return {to_device(g[0], from)}; });
  }
  return out;
}

Tensor& copy_(Tensor& dst, const Tensor& src, bool non_blocking) {
  check_inplace("copy_", dst);
  TRIREME_CHECK(src.defined(), "copy_: the source is undefined");
  if (src.device() != dst.device() && src.dtype() == dst.dtype() && src.sizes() == dst.sizes() &&
      src.is_contiguous() && dst.is_contiguous()) {
    // Straight into dst: no staging tensor, and a pinned dst can take a non_blocking copy.
    TRIREME_CHECK(device_copy_fn() != nullptr, "copy_: cannot copy from ", src.device(), " to ", dst.device(),
                  ": this build has no backend for that device");
    device_copy_fn()(src.detach(), dst, non_blocking);
    dst.bump_version();
    return dst;
  }
  Tensor s = src;
  if (s.device() != dst.device()) s = to_device(s.detach(), dst.device(), non_blocking);
  copy_kernel(broadcast_view(s, dst.sizes()), dst);
  dst.bump_version();
  return dst;
}

}  // namespace trireme
