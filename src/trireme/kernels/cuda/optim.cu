// CUDA optimizer kernels: AdamW in one pass over the elements, the twin of kernels/cpu/optim.cpp
// (same order of operations and the same scalars rounded once to the state type; m and v are f32
// for bf16/f16 parameters, which are updated in f32 and rounded once), for one parameter or for
// many in one launch (adamw_multi); and gradient clipping's scale of many tensors in one launch.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/cuda/scale_many.cuh"
#include "trireme/kernels/cuda/vector_map.cuh"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"
#include "trireme/kernels/scalar_slots.h"

namespace trireme::cuda_kernels {
namespace {

template <class A>
struct AdamWScalars {
  A decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

template <class A>
AdamWScalars<A> adamw_scalars(const AdamWHyper& h) {
  AdamWScalars<A> s;
  s.decay = A(1.0 - h.lr * h.weight_decay);
  s.beta1 = A(h.beta1);
  s.one_minus_beta1 = A(1.0 - h.beta1);
  s.beta2 = A(h.beta2);
  s.one_minus_beta2 = A(1.0 - h.beta2);
  s.bc2_sqrt = A(std::sqrt(h.bias_correction2));
  s.eps = A(h.eps);
  s.neg_step_size = A(-(h.lr / h.bias_correction1));
  return s;
}

// 16-byte state accesses: four f32 states a thread (8-byte parameter accesses for 16-bit
// types), two for f64.
template <class A>
inline constexpr int kAdamWVec = sizeof(A) == 8 ? 2 : 4;

// One element's update; every path below runs exactly these operations, so the bits do not
// depend on which path took an element (nor differ from the CPU twin's).
template <class D, class A>
__device__ __forceinline__ void adamw_element(D& p, D g_in, A& m, A& v, const AdamWScalars<A>& s) {
  const A gi = to_acc(g_in);
  A pi = to_acc(p) * s.decay;
  const A mi = m * s.beta1 + s.one_minus_beta1 * gi;
  const A vi = v * s.beta2 + s.one_minus_beta2 * gi * gi;
  m = mi;
  v = vi;
  const A denom = m_sqrt(vi) / s.bc2_sqrt + s.eps;
  pi += s.neg_step_size * (mi / denom);
  p = from_acc<D>(pi);
}

// Updates elements [0, n) of one tensor, this thread taking every stride-th from `first`: the
// first `vectors` packs of V elements as vectors, the rest one by one. Shared by the
// single-tensor kernel (a grid-stride loop) and the multi-tensor one (a block per chunk).
template <class D, int V, class A = dacc_t<D>>
__device__ __forceinline__ void adamw_span(D* p, const D* g, A* m, A* v, int64_t n, int64_t vectors, int64_t first,
                                           int64_t stride, const AdamWScalars<A>& s) {
  for (int64_t k = first; k < vectors; k += stride) {
    Packed<D, V> pv = reinterpret_cast<const Packed<D, V>*>(p)[k];
    const Packed<D, V> gv = reinterpret_cast<const Packed<D, V>*>(g)[k];
    Packed<A, V> mv = reinterpret_cast<const Packed<A, V>*>(m)[k];
    Packed<A, V> vv = reinterpret_cast<const Packed<A, V>*>(v)[k];
#pragma unroll
    for (int e = 0; e < V; ++e) adamw_element(pv.v[e], gv.v[e], mv.v[e], vv.v[e], s);
    reinterpret_cast<Packed<D, V>*>(p)[k] = pv;
    reinterpret_cast<Packed<A, V>*>(m)[k] = mv;
    reinterpret_cast<Packed<A, V>*>(v)[k] = vv;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) adamw_element(p[i], g[i], m[i], v[i], s);
}

// V elements per thread and access when every buffer is 16-byte aligned (V > 1): the update
// reads and writes ~22 bytes an element for bf16 parameters, so it is bound by memory, and one
// 2-byte access per instruction left an H200 at ~3 TB/s (9.7 ms a step for GPT 1.3B's
// parameters). V = 1: one element at a time, any alignment. The last n % V elements take the
// scalar loop. `placed`: the scalars in device memory (Note [scalars in device memory]), else
// null and `by_value` holds them.
template <class D, int V>
__global__ void adamw_kernel(D* p, const D* g, dacc_t<D>* m, dacc_t<D>* v, int64_t n, AdamWScalars<dacc_t<D>> by_value,
                             const AdamWScalars<dacc_t<D>>* placed) {
  using A = dacc_t<D>;
  const AdamWScalars<A> s = placed ? *placed : by_value;
  adamw_span<D, V>(p, g, m, v, n, V > 1 ? n / V : 0, int64_t(blockIdx.x) * blockDim.x + threadIdx.x,
                   int64_t(gridDim.x) * blockDim.x, s);
}

template <class T>
void adamw_cuda(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWHyper& h) {
  using D = device_t<T>;
  using A = acc_t<T>;
  const int64_t n = param.numel();
  if (n == 0) return;
  const AdamWScalars<A> s = adamw_scalars<A>(h);
  const AdamWScalars<A>* placed = nullptr;
  if (!place_scalars(s, placed)) return;
  LaunchContext ctx(param);
  D* p = dptr<T>(param);
  const D* g = dptr<T>(grad);
  A* m = exp_avg.data<A>();
  A* v = exp_avg_sq.data<A>();
  constexpr int V = kAdamWVec<A>;
  if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
    adamw_kernel<D, V><<<grid_for((n + V - 1) / V), kBlock, 0, ctx.stream>>>(p, g, m, v, n, s, placed);
  } else {
    adamw_kernel<D, 1><<<grid_for(n), kBlock, 0, ctx.stream>>>(p, g, m, v, n, s, placed);
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

// ---- many parameters in one launch ----
//
// A launch's work is a table of chunks, passed as the kernel's parameter (up to 32 KB since CUDA
// 12.1; no copy to device memory, so nothing but the scalars changes between replays of a
// captured launch): one block per chunk of one tensor. A call whose tensors or chunks do not fit
// in one table launches several, in order.
//
// The chunk is the smallest power of two from 2^11 to 2^16 elements of which the call's elements
// make at most a table's worth, so that a call of few elements still spreads over the whole GPU
// (the tensors' partial last chunks may add a short second launch). With a fixed 2^16 the merged
// update of one MLP weight and its bias (2.4M elements) ran as 37 blocks on an H200's 132
// multiprocessors, and pure-bf16 GPT-2 124M spent 3.1 ms a step in AdamW instead of 0.9
// (docs/STATIC_GRAPH.md, Passes).
constexpr int kMinChunkShift = 11, kMaxChunkShift = 16;

template <class D>
struct AdamWChunkTable {
  using A = dacc_t<D>;
  static constexpr int kTensors = 96;
  static constexpr int kChunks = 1024;
  D* p[kTensors];
  const D* g[kTensors];
  A* m[kTensors];
  A* v[kTensors];
  int64_t n[kTensors];
  AdamWScalars<A> by_value[kTensors];
  // The scalars in device memory (Note [scalars in device memory]), for every update of the call:
  // this launch's tensor k reads placed[update[k]]; null: by_value[k].
  const AdamWScalars<A>* placed;
  int update[kTensors];
  int tensors, chunks;
  int chunk_shift;            // a chunk is 2^chunk_shift elements
  int chunk_tensor[kChunks];  // chunk c: elements [chunk_index[c] << chunk_shift, ...) of tensor chunk_tensor[c]
  int chunk_index[kChunks];
};

// The chunk size (as a shift) for a call updating `elements` elements in all: see above.
template <int kChunks>
int chunk_shift_for(int64_t elements) {
  int shift = kMinChunkShift;
  while (shift < kMaxChunkShift && (elements >> shift) >= kChunks) ++shift;
  return shift;
}

// The same elements, in the same operations, as adamw_kernel: vectors when the tensor's four
// buffers are 16-byte aligned (a chunk starts at a multiple of 2^11 elements, so its pointers are
// aligned as the tensor's), else one element at a time.
template <class D>
__global__ void __launch_bounds__(kBlock) adamw_multi_kernel(const __grid_constant__ AdamWChunkTable<D> t) {
  using A = dacc_t<D>;
  constexpr int V = kAdamWVec<A>;
  const int k = t.chunk_tensor[blockIdx.x];
  const int64_t chunk = int64_t(1) << t.chunk_shift;
  const int64_t begin = int64_t(t.chunk_index[blockIdx.x]) << t.chunk_shift;
  const int64_t n = t.n[k] - begin < chunk ? t.n[k] - begin : chunk;
  const AdamWScalars<A> s = t.placed ? t.placed[t.update[k]] : t.by_value[k];
  D* p = t.p[k] + begin;
  const D* g = t.g[k] + begin;
  A* m = t.m[k] + begin;
  A* v = t.v[k] + begin;
  const bool vectors_ok = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) |
                            reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) % 16) == 0;
  adamw_span<D, V>(p, g, m, v, n, vectors_ok ? n / V : 0, threadIdx.x, blockDim.x, s);
}

template <class T>
void adamw_multi_cuda(std::span<const AdamWUpdate> updates) {
  using D = device_t<T>;
  using A = acc_t<T>;
  using Table = AdamWChunkTable<D>;
  static_assert(sizeof(Table) <= 32000, "a kernel's parameters are at most 32764 bytes");
  if (updates.empty()) return;
  std::vector<AdamWScalars<A>> scalars;
  scalars.reserve(updates.size());
  for (const AdamWUpdate& u : updates) scalars.push_back(adamw_scalars<A>(*u.hyper));
  const AdamWScalars<A>* placed = nullptr;
  if (!place_scalars(std::span<const AdamWScalars<A>>(scalars), placed)) return;
  LaunchContext ctx(*updates[0].param);
  int64_t elements = 0;
  for (const AdamWUpdate& u : updates) elements += u.param->numel();
  const int shift = chunk_shift_for<Table::kChunks>(elements);
  auto table = std::make_unique<Table>();
  auto reset = [&] {
    table->placed = placed;
    table->chunk_shift = shift;
    table->tensors = 0;
    table->chunks = 0;
  };
  auto launch = [&] {
    if (table->chunks == 0) return;
    adamw_multi_kernel<D><<<unsigned(table->chunks), kBlock, 0, ctx.stream>>>(*table);
    TRIREME_CUDA_CHECK_LAUNCH();
  };
  reset();
  for (size_t u = 0; u < updates.size(); ++u) {
    const AdamWUpdate& up = updates[u];
    const int64_t n = up.param->numel();
    int k = -1;  // the tensor's index in the current table, once it is in it
    for (int64_t c = 0; (c << shift) < n; ++c) {
      if (table->chunks == Table::kChunks || (k < 0 && table->tensors == Table::kTensors)) {
        launch();
        reset();
        k = -1;
      }
      if (k < 0) {
        k = table->tensors++;
        table->update[k] = int(u);
        table->p[k] = dptr<T>(*up.param);
        table->g[k] = dptr<T>(*up.grad);
        table->m[k] = up.exp_avg->data<A>();
        table->v[k] = up.exp_avg_sq->data<A>();
        table->n[k] = n;
        table->by_value[k] = scalars[u];
      }
      table->chunk_tensor[table->chunks] = k;
      table->chunk_index[table->chunks] = int(c);
      ++table->chunks;
    }
  }
  launch();
}

// Gradient clipping's scale of many tensors in one launch (scale_many.cuh).
template <class T>
void scale_many_cuda(std::span<Tensor* const> tensors, const Tensor& factor) {
  launch_scale_many<T>(tensors, factor.data<double>(), 0.0, nullptr);
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_optim) {
  registry.add_each<AdamWKernel, double, float, bf16_t, f16_t>("adamw", DeviceType::cuda,
                                                                []<class T>() { return &adamw_cuda<T>; });
  registry.add_each<AdamWMultiKernel, double, float, bf16_t, f16_t>("adamw_multi", DeviceType::cuda,
                                                                     []<class T>() { return &adamw_multi_cuda<T>; });
  registry.add_each<ScaleManyKernel, double, float, bf16_t, f16_t>("scale_many", DeviceType::cuda,
                                                                    []<class T>() { return &scale_many_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
