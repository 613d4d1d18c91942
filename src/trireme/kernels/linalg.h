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
// out (M, N) = c + a · b for 2-D operands, registered as "matmul_add": BLAS's beta = 1 with c as
// the C operand, so a sum of products (c = out) or a product plus a partial sum received from a
// peer (Note [the input gradient's sum in the GEMM], parallel/sp_linear.cpp) needs no separate
// add pass; bf16/f16 round once, after the f32 sum. c is contiguous, out's shape and dtype, and
// either out itself or memory that does not overlap it.
using MatmulAddKernel = void (*)(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out);

}  // namespace trireme
