// Internal to the CUDA kernels: device element types, strided offsets, and launch helpers.
//
// Kernels are templated on the device element type (D: double, float, __nv_bfloat16, __half,
// int64_t, int32_t, bool) and compute in its accumulation type (element_types.cuh: float for the
// 16-bit types). Strided operands go through OffsetCalc (dims coalesced on the host first, so most tensors take the contiguous
// path or one or two strided dims).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <type_traits>

#include "trireme/core/tensor.h"
#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/stream.h"
#include "trireme/kernels/cuda/element_types.cuh"

namespace trireme::cuda_kernels {

// ---- element types ----
template <class T> struct device_type { using type = T; };
template <> struct device_type<bf16_t> { using type = __nv_bfloat16; };
template <> struct device_type<f16_t> { using type = __half; };
template <class T> using device_t = typename device_type<T>::type;

// ---- strided offsets ----
inline constexpr int kMaxDims = 8;

// Element offsets of N operands for a linear index over a (coalesced) shape.
template <int N>
struct OffsetCalc {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};

  __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < ndim) {
        const int64_t i = linear % sizes[d];
        linear /= sizes[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += i * strides[d][k];
      }
    }
  }
};

// Drops size-1 dims and merges neighbours that every operand walks contiguously; contiguous
// is set when one unit-stride dim (or none) remains for all operands.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& shape, const std::array<const Shape*, N>& op_strides, bool& contiguous) {
  OffsetCalc<N> oc;
  Shape sizes;
  std::array<Shape, N> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; k < N && merge; ++k) merge = strides[k].back() == (*op_strides[k])[d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (int k = 0; k < N; ++k) strides[k].back() = (*op_strides[k])[d];
    } else {
      sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back((*op_strides[k])[d]);
    }
  }
  TRIREME_CHECK(sizes.size() <= size_t(kMaxDims), "CUDA kernels: a strided operand over ", shape,
                " has more than ", kMaxDims, " dims that cannot be merged; make it contiguous first");
  contiguous = sizes.size() == 0 || sizes.size() == 1;
  for (int k = 0; k < N && contiguous && !sizes.empty(); ++k) contiguous = strides[k][0] == 1;
  oc.ndim = int(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    oc.sizes[d] = sizes[d];
    for (int k = 0; k < N; ++k) oc.strides[d][k] = strides[k][d];
  }
  return oc;
}

// ---- launching ----
inline constexpr int kBlock = 256;

// Enough blocks for a grid-stride loop to fill the device without a launch of millions of blocks.
inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  return unsigned(std::min<int64_t>(std::max<int64_t>(blocks, 1), 132 * 32));
}

// The stream a kernel on `t`'s device goes to, with that device made current for the launch.
struct LaunchContext {
  explicit LaunchContext(const Tensor& t) : guard(t.device().index), stream(cuda::current_stream(t.device().index).handle()) {}
  cuda::DeviceGuard guard;
  cudaStream_t stream;
};

// Calls fn(off) for every linear index, off[k] the element offset of operand k; contiguous
// operands take a loop with no index arithmetic.
template <int N, class Fn>
__global__ void elementwise_kernel(int64_t n, OffsetCalc<N> oc, bool contiguous, Fn fn) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (contiguous) {
    for (; i < n; i += stride) {
      int64_t off[N];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = i;
      fn(off);
    }
  } else {
    for (; i < n; i += stride) {
      int64_t off[N];
      oc.get(i, off);
      fn(off);
    }
  }
}

// Launches fn over `shape` with operands of the given strides on `ctx`'s stream.
template <int N, class Fn>
void launch_elementwise(const LaunchContext& ctx, const Shape& shape, const std::array<const Shape*, N>& strides, Fn fn) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  bool contiguous = false;
  OffsetCalc<N> oc = make_offset_calc<N>(shape, strides, contiguous);
  elementwise_kernel<N><<<grid_for(n), kBlock, 0, ctx.stream>>>(n, oc, contiguous, fn);
  TRIREME_CUDA_CHECK_LAUNCH();
}

// Typed device pointer to a tensor's first element (its offset applied).
template <class T>
inline device_t<T>* dptr(const Tensor& t) {
  return reinterpret_cast<device_t<T>*>(t.data<T>());
}

// Calls fn(typed pointer) for an index tensor (ids, targets) of i64 or i32; the ops check the dtype.
template <class Fn>
void with_index_ptr(const Tensor& index, Fn&& fn) {
  if (index.dtype() == DType::i64) {
    fn(index.data<int64_t>());
  } else {
    fn(index.data<int32_t>());
  }
}

}  // namespace trireme::cuda_kernels
