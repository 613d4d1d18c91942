// Matrix products through BLAS (OpenBLAS on the CPU).
#pragma once

#include <functional>

#include "trireme/core/tensor.h"

namespace trireme {

// Like numpy/PyTorch matmul: 1-D and 2-D operands, and batched operands whose leading
// dimensions broadcast. Low-precision inputs compute in f32.
Tensor matmul(const Tensor& a, const Tensor& b);
// out += a · b in one pass (the GEMM reads out as its C operand: no product tensor, no add), for
// 2-D a (M, K) and b (K, N) of any strides and a contiguous out (M, N). Records no autograd:
// for sums of products inside a backward (a weight gradient summed over row blocks).
void addmm_(Tensor& out, const Tensor& a, const Tensor& b);
// out = c + a · b in one pass (c read as the GEMM's C operand), likewise without autograd; c is
// contiguous, out's shape and dtype, and out itself or memory apart from it (a peer's partial
// sum that landed in staging memory, say). bf16/f16 round once, after the f32 sum.
void addmm_into(Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b);
// y = x · Wᵀ + b for x (..., in), weight (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// linear with a hook on its input gradient, for layers that must communicate it (a tensor-parallel
// column layer all-reduces it). The backward computes grad_input first and calls
// hook(grad_input), which may start asynchronous work on it in place and returns what to run once
// the weight and bias gradients are queued (typically: wait for that work). So the communication
// overlaps the weight-gradient GEMM instead of following it.
using GradInputHook = std::function<std::function<void()>(Tensor& grad_input)>;
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, GradInputHook grad_input_hook);

}  // namespace trireme
