// Signatures of the optimizer kernel family: fused single-pass parameter updates.
#pragma once

#include <span>

#include "trireme/core/tensor.h"

namespace trireme {

// AdamW's scalars for one step; bias corrections are 1 - beta^step, computed by the caller in f64.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double bias_correction1 = 1.0;
  double bias_correction2 = 1.0;
};

// One AdamW step, in place, element by element (PyTorch's order of operations):
//   p  *= 1 - lr * wd
//   m   = beta1 * m + (1 - beta1) * g
//   v   = beta2 * v + (1 - beta2) * g * g
//   p  -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
// Registered by the dtype T of param and grad; m and v are acc_t<T> (f32 for bf16/f16).
// All four tensors are contiguous with the same number of elements, on one device.
using AdamWKernel = void (*)(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                             const AdamWHyper& hyper);

// One parameter's update in a multi-tensor AdamW call: adamw's arguments.
struct AdamWUpdate {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;
  Tensor* exp_avg_sq;
  const AdamWHyper* hyper;
};

// The AdamW step of many parameters in one call (one launch on a GPU, split only when its table
// of chunks is too large for one): each element gets exactly the operations adamw gives it, with
// its own parameter's hyper-parameters, so the results are adamw's bit for bit. Registered as
// "adamw_multi" by the dtype T of every param and grad (m and v acc_t<T>); every tensor is
// contiguous, all on one device, and no two updates touch the same elements.
// graph/multi_tensor.h merges a static graph's adamw calls into one call of it.
using AdamWMultiKernel = void (*)(std::span<const AdamWUpdate> updates);

// Gradient clipping's scale of many tensors in one call (one launch on a GPU, where a call per
// gradient costs a launch each): every element x of every tensor becomes x * A(factor) computed
// in A = acc_t<T>, with factor (a one-element f64 tensor on their device) rounded to A once: the
// bits of mul_(x, factor) with the factor as a host scalar, and, for f32 and f64, of multiplying by
// the factor cast to T. Registered by the dtype T of every tensor; each is contiguous.
using ScaleManyKernel = void (*)(std::span<Tensor* const> tensors, const Tensor& factor);

}  // namespace trireme
