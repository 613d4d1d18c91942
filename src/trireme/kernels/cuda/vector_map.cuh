// Internal to the CUDA kernels: elementwise maps over contiguous, 16-byte aligned operands, each
// thread moving whole 16-byte vectors. The general path (launch.cuh's elementwise_kernel) moves
// one element per thread and instruction; for the 2-byte types that is an eighth of a memory
// transaction's width, and on an H200 the instruction issue rate, not the memory, became the
// limit of the large activations' elementwise kernels (GELU and its backward, the casts).
#pragma once

#include <algorithm>

#include "trireme/kernels/cuda/launch.cuh"

namespace trireme::cuda_kernels {

// V values of T that load and store as one (or, for 8-byte T with V = 2, one 16-byte) access.
template <class T, int V>
struct alignas(sizeof(T) * V) Packed {
  T v[V];
};

// Elements per thread and vector: as many of the widest operand as fill 16 bytes (void, the
// missing second operand of a unary map, counts as one byte).
template <class T> struct size_or_one { static constexpr size_t value = sizeof(T); };
template <> struct size_or_one<void> { static constexpr size_t value = 1; };
template <class... T>
inline constexpr int kVecWidth = int(16 / std::max({size_or_one<T>::value...}));

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// out[i] = f(a[i]) or f(a[i], b[i % b_period]) over n elements, converted through acc_t on the
// way in (to_acc) and out (from_acc); b_period = n unless b is a row broadcast over the rows of a
// (a bias), and then a multiple of V. The last n % V elements take a scalar loop.
template <int V, class Out, class In0, class In1, class F>
__global__ void vector_map_kernel(int64_t n, Out* out, const In0* a, const In1* b, int64_t b_period, F f) {
  const int64_t vectors = n / V;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t k = first; k < vectors; k += stride) {
    const Packed<In0, V> va = reinterpret_cast<const Packed<In0, V>*>(a)[k];
    Packed<Out, V> vo;
    if constexpr (std::is_same_v<In1, void>) {
#pragma unroll
      for (int e = 0; e < V; ++e) vo.v[e] = from_acc<Out>(f(to_acc(va.v[e])));
    } else {
      const Packed<In1, V> vb = reinterpret_cast<const Packed<In1, V>*>(b)[b_period == n ? k : k % (b_period / V)];
#pragma unroll
      for (int e = 0; e < V; ++e) vo.v[e] = from_acc<Out>(f(to_acc(va.v[e]), to_acc(vb.v[e])));
    }
    reinterpret_cast<Packed<Out, V>*>(out)[k] = vo;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    if constexpr (std::is_same_v<In1, void>) {
      out[i] = from_acc<Out>(f(to_acc(a[i])));
    } else {
      out[i] = from_acc<Out>(f(to_acc(a[i]), to_acc(b[i % b_period])));
    }
  }
}

// True when it launched: every operand is contiguous over the same shape (or b is a row of
// b_period elements broadcast over a's rows) and starts on a 16-byte boundary (views at odd
// offsets take the general path). b may be null for a unary map; In1 is then void.
template <class Out, class In0, class In1, class F>
bool try_vector_map(const LaunchContext& ctx, int64_t n, Out* out, const In0* a, const In1* b, F f,
                    int64_t b_period = 0) {
  constexpr int V = kVecWidth<Out, In0, In1>;
  if (b_period == 0) b_period = n;
  if (!aligned16(out) || !aligned16(a) || (b != nullptr && !aligned16(b))) return false;
  if (b_period != n && (b_period % V != 0 || n % b_period != 0)) return false;
  if (n == 0) return true;
  vector_map_kernel<V><<<grid_for((n + V - 1) / V), kBlock, 0, ctx.stream>>>(n, out, a, b, b_period, f);
  TRIREME_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace trireme::cuda_kernels
