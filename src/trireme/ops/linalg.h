// Matrix products through BLAS (OpenBLAS on the CPU).
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// Like numpy/PyTorch matmul: 1-D and 2-D operands, and batched operands whose leading
// dimensions broadcast. Low-precision inputs compute in f32.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x · Wᵀ + b for x (..., in), weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace trireme
