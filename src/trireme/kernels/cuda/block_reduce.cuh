// Internal to the CUDA kernels: warp and block reductions (sum, max) with a fixed combining order
// for a given block size, so row statistics are deterministic run to run.
#pragma once

#include <cuda_runtime.h>

#include <limits>

namespace trireme::cuda_kernels {

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// Every thread of the block gets the result. blockDim.x is a multiple of 32 (at most 1024);
// `scratch` holds 32 values and may be reused right after the call returns.
template <class A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous use of scratch is finished
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A r = lane < warps ? scratch[lane] : A(0);
  return warp_sum(r);
}

template <class A>
__device__ __forceinline__ A block_max(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A r = lane < warps ? scratch[lane] : -std::numeric_limits<A>::infinity();
  return warp_max(r);
}

// Threads for one block per row of length d: a multiple of 32, at most `cap`.
inline int row_block_threads(int64_t d, int cap = 256) {
  int t = 32;
  while (t < cap && t < d) t *= 2;
  return t;
}

}  // namespace trireme::cuda_kernels
