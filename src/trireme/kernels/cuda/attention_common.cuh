// Internal to the CUDA attention kernels: the argument block every attention kernel takes (head
// matrices as pointer + batch/head/row strides, the log-sum-exp and delta rows), shared by the
// tensor-core path (attention_flash.cu) and the simple fused path (attention.cu).
#pragma once

#include <cstdint>

#include "trireme/kernels/cuda/launch.cuh"

namespace trireme::cuda_kernels {

// One (B, H, T, hd) operand whose last dim has stride 1: row i of pair (b, h) starts at
// p + b s0 + h s1 + i s2.
struct HeadPtr {
  void* p = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;
  template <class D>
  __device__ __forceinline__ D* row(int b, int h, int64_t i) const {
    return static_cast<D*>(p) + b * s0 + h * s1 + i * s2;
  }
};

struct AttnArgs {
  HeadPtr q, k, v, o, dout, dq, dk, dv;
  void* lse = nullptr;    // (B, H, Tq) stat dtype, contiguous
  void* delta = nullptr;  // (B, H, Tq) stat dtype: rowsum(dO ∘ O), backward only
  int nh = 1, tq = 0, tk = 0, hd = 0;
  bool causal = false;
  double scale = 1.0;  // 1/sqrt(hd)
};

// Tensor-core kernels (attention_flash.cu), for D = __nv_bfloat16 or __half: hd a multiple of 16 up
// to 128, every operand 16-byte aligned with strides that are multiples of 8 elements.
// The backward needs a.delta filled (attention.cu's delta kernels).
template <class D>
void flash_attention_forward(const AttnArgs& a, int nb, cudaStream_t stream);
template <class D>
void flash_attention_backward(const AttnArgs& a, int nb, cudaStream_t stream);

}  // namespace trireme::cuda_kernels
