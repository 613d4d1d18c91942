// Ops over many tensors in one kernel call (multi_tensor.h).
#include "trireme/ops/multi_tensor.h"

#include <vector>

#include "trireme/autograd/grad_mode.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/recording.h"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"

namespace trireme {
namespace {

void check_tensors(const char* op, std::span<const Tensor> xs, Device device) {
  for (const Tensor& x : xs) {
    TRIREME_CHECK(x.defined(), op, ": an undefined tensor");
    TRIREME_CHECK(is_floating(x.dtype()), op, ": needs floating tensors, got ", x.dtype());
    TRIREME_CHECK(x.device() == device, op, ": a tensor on ", x.device(), " among tensors on ", device,
                  " (all must be on one device)");
  }
}

}  // namespace

Tensor sum_squares_all(std::span<const Tensor> xs, Device device) {
  check_tensors("sum_squares_all", xs, device);
  if (xs.empty()) return zeros({}, DType::f64, device);
  bool one_call = !recording_for_replay();
  for (const Tensor& x : xs) one_call = one_call && x.dtype() == xs[0].dtype() && x.is_contiguous();
  if (!one_call) {
    Tensor total = zeros({}, DType::f64, device);
    for (const Tensor& x : xs) total = add(total, sum_squares(x.detach()));
    return total;
  }
  std::vector<const Tensor*> ins;
  for (const Tensor& x : xs) ins.push_back(&x);
  Tensor out = Tensor::empty({}, DType::f64, device);
  find_kernel<SumSquaresManyKernel>("sum_squares_many", device, xs[0].dtype())(ins, out);
  return out;
}

void mul_all_(std::span<Tensor> xs, const Tensor& factor) {
  if (xs.empty()) return;
  const Device device = xs[0].device();
  check_tensors("mul_all_", xs, device);
  for (const Tensor& x : xs) {
    TRIREME_CHECK(!(autograd::grad_enabled() && x.requires_grad()),
                  "mul_all_: an in-place write to a tensor that requires grad; do it under NoGradGuard");
  }
  TRIREME_CHECK(factor.defined() && factor.numel() == 1 && factor.dtype() == DType::f64 && factor.device() == device,
                "mul_all_: the factor must be one f64 element on ", device, ", got ", factor.str());
  const Tensor f = contiguous(factor);
  if (recording_for_replay()) {
    std::vector<Tensor> factor_as(kNumDTypes);  // the factor in each dtype, cast once, as a scalar view
    for (Tensor& x : xs) {
      TRIREME_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, "mul_all_: a traced ", x.dtype(),
                    " tensor (f32 or f64 only: the factor cast to 16 bits would be rounded)");
      Tensor& as_x = factor_as[size_t(x.dtype())];
      if (!as_x.defined()) {
        const Tensor cast = to_dtype(f, x.dtype());
        as_x = cast.alias({}, {}, cast.offset());
      }
      mul_(x, as_x);
    }
    return;
  }
  std::vector<std::vector<Tensor*>> by_dtype(kNumDTypes);
  for (Tensor& x : xs) {
    if (x.is_contiguous()) {
      by_dtype[size_t(x.dtype())].push_back(&x);
    } else {  // a view: a contiguous copy scaled, then written back through it
      Tensor c = contiguous(x);
      Tensor* one[] = {&c};
      find_kernel<ScaleManyKernel>("scale_many", device, x.dtype())(one, f);
      copy_(x, c);
    }
  }
  for (size_t d = 0; d < by_dtype.size(); ++d) {
    if (by_dtype[d].empty()) continue;
    find_kernel<ScaleManyKernel>("scale_many", device, DType(d))(by_dtype[d], f);
  }
  for (Tensor& x : xs) x.bump_version();
}

void mul_all_(std::span<Tensor> xs, double s) {
  if (xs.empty()) return;
  if (recording_for_replay()) {
    for (Tensor& x : xs) mul_(x, s);
    return;
  }
  mul_all_(xs, full({1}, s, DType::f64, xs[0].device()));
}

}  // namespace trireme
