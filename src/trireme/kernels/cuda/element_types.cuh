// Internal to the CUDA kernels: the accumulation types of the device element types (D: double,
// float, __nv_bfloat16, __half, int64_t, int32_t, bool) and the conversions to and from them.
// Compiled by nvcc with the kernels and by NVRTC into fused elementwise kernels
// (kernels/cuda/fused.cu), so it includes nothing but the CUDA half-precision headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace trireme::cuda_kernels {

template <class D> struct acc_of { using type = D; };
template <> struct acc_of<__nv_bfloat16> { using type = float; };
template <> struct acc_of<__half> { using type = float; };
template <class D> using dacc_t = typename acc_of<D>::type;

template <class D> __device__ __forceinline__ dacc_t<D> to_acc(D x) { return x; }
template <> __device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
template <class D, class A> __device__ __forceinline__ D from_acc(A x) { return D(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_acc(float x) { return __float2half_rn(x); }

// Whether an accumulation type is floating-point (the float ops exist only there).
template <class A> inline constexpr bool is_float_acc_v = false;
template <> inline constexpr bool is_float_acc_v<float> = true;
template <> inline constexpr bool is_float_acc_v<double> = true;

}  // namespace trireme::cuda_kernels
