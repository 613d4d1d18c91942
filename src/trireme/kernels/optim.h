// Signatures of the optimizer kernel family: fused single-pass parameter updates.
#pragma once

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

}  // namespace trireme
