// Internal to the CUDA kernels: scaled dot-product attention by cuDNN's fused flash-attention
// engine, for 16-bit operands, when this build found cuDNN 9 (CMakeLists.txt). attention.cu tries
// it first and runs its own kernels when it answers false: no cuDNN in this build, cuDNN has no
// engine for these operands (said once in the log), a kernels::VaryingShapes scope (eager
// generation: a plan per length would cost more than it saves), or TRIREME_CUDNN_ATTENTION=0 in
// the environment. Its log-sum-exps are trireme's (lse_i = max_j s_ij + log Σ_j exp(s_ij - max), s the
// scaled scores), so either backward can follow either forward.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "trireme/core/tensor.h"

namespace trireme::cuda_kernels {

// Whether cuDNN attention is built in and not turned off by TRIREME_CUDNN_ATTENTION=0 (a
// kernels::VaryingShapes scope still keeps it out of its calls: tests use one to run trireme's
// own kernels too).
bool cudnn_attention_enabled();

// For `trireme env`: cuDNN's version and whether attention uses it, or why not.
std::string describe_cudnn_attention();

// out and lse as AttentionKernel (kernels/nn.h) fills them; q, k, v, out bf16 or f16.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& lse,
                             cudaStream_t stream);

// The gradients as AttentionBackwardKernel fills them, from the forward's out and lse.
bool cudnn_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v,
                              cudaStream_t stream);

}  // namespace trireme::cuda_kernels
