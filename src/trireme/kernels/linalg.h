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
// out (M, N) = a (M, K) · b (K, N) and row_sums (M) = Σ_k a[m, k], registered as
// "matmul_row_sums": a linear layer's weight gradient gᵀ·x together with its bias gradient (the
// column sums of g), in one pass over g where the backend can (cuBLASLt's bias-gradient
// epilogue); elsewhere, and where cuBLASLt has no algorithm for it, the product and then the same
// sums as the sum kernel's over aᵀ's rows. 2-D a and b of any strides; out and row_sums contiguous,
// in a's dtype; bf16/f16 accumulate in f32.
using MatmulRowSumsKernel = void (*)(const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums);

// GPT's MLP runs a product and then GELU (tanh approximation), and its backward a product and then
// GELU's gradient; these kernels do each pair in one call where the backend can apply GELU in
// the GEMM's epilogue (cuBLASLt's GELU_AUX and DGELU), so that the product never makes a round
// trip through memory. The static mode's folds use them (graph/gemm_folds.h). The epilogue applies
// GELU to the f32 product before rounding; elsewhere (the CPU, shapes cuBLASLt declines) the
// product is rounded first and the elementwise kernels run after it, with the unfused calls' bits.
// 2-D a (M, K) and b (K, N) of any strides; out and pre (M, N) contiguous, in a's dtype.
//
// "matmul_gelu": pre = a · b [+ bias (N)], out = gelu_tanh(pre); pre is what GELU's backward reads.
using MatmulGeluKernel = void (*)(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Tensor& pre);
// "matmul_gelu_backward": out = (a · b) ⊙ gelu_tanh'(pre): the gradient of GELU's input, from the
// product that makes the gradient of its output.
using MatmulGeluBackwardKernel = void (*)(const Tensor& a, const Tensor& b, const Tensor& pre, Tensor& out);

// The unfused forms, through the device's matmul and GELU kernels: what the kernels above do where
// no epilogue does it.
void matmul_then_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Tensor& pre);
void matmul_then_gelu_backward(const Tensor& a, const Tensor& b, const Tensor& pre, Tensor& out);

// row_sums (M) = Σ_k a[m, k] for a 2-D a, by the sum kernel of a's device over aᵀ's first dim
// (the sums sum(aᵀ, {0}) makes, in its order): MatmulRowSumsKernel's sums where the product does
// not make them.
void sum_rows_of(const Tensor& a, Tensor& row_sums);

}  // namespace trireme
