// Signatures of the matrix-product kernel family (shared by the CPU and CUDA backends).
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// out (..., M, N) = a (..., M, K) · b (..., K, N) [+ bias (N) added to every row].
// The batch dims of a, b and out are equal (a broadcast operand has stride 0 there); a and b may
// have any strides (a transposed view is passed to BLAS as a transposed operand, not copied);
// out is contiguous. bias is undefined or a 1-D tensor of out's dtype. Registered by dtype;
// bf16/f16 compute and accumulate in f32.
using MatmulKernel = void (*)(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out);
// The same family registered as "matmul_accumulate": out += a · b (BLAS's beta = 1, so a sum of
// products needs no separate add pass); bias must be undefined.

}  // namespace trireme
