// CUDA optimizer kernels: AdamW in one pass over the elements, the twin of kernels/cpu/optim.cpp
// (same order of operations and the same scalars rounded once to the state type; m and v are f32
// for bf16/f16 parameters, which are updated in f32 and rounded once).
#include <cmath>

#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
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
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = V > 1 ? n / V : 0;
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

template <class T>
void adamw_cuda(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWHyper& h) {
  using D = device_t<T>;
  using A = acc_t<T>;
  const int64_t n = param.numel();
  if (n == 0) return;
  AdamWScalars<A> s;
  s.decay = A(1.0 - h.lr * h.weight_decay);
  s.beta1 = A(h.beta1);
  s.one_minus_beta1 = A(1.0 - h.beta1);
  s.beta2 = A(h.beta2);
  s.one_minus_beta2 = A(1.0 - h.beta2);
  s.bc2_sqrt = A(std::sqrt(h.bias_correction2));
  s.eps = A(h.eps);
  s.neg_step_size = A(-(h.lr / h.bias_correction1));
  const AdamWScalars<A>* placed = nullptr;
  if (!place_scalars(s, placed)) return;
  LaunchContext ctx(param);
  D* p = dptr<T>(param);
  const D* g = dptr<T>(grad);
  A* m = exp_avg.data<A>();
  A* v = exp_avg_sq.data<A>();
  // 16-byte state accesses: four f32 states a thread (8-byte parameter accesses for 16-bit
  // types), two for f64.
  constexpr int V = sizeof(A) == 8 ? 2 : 4;
  if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
    adamw_kernel<D, V><<<grid_for((n + V - 1) / V), kBlock, 0, ctx.stream>>>(p, g, m, v, n, s, placed);
  } else {
    adamw_kernel<D, 1><<<grid_for(n), kBlock, 0, ctx.stream>>>(p, g, m, v, n, s, placed);
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_optim) {
  registry.add_each<AdamWKernel, double, float, bf16_t, f16_t>("adamw", DeviceType::cuda,
                                                                []<class T>() { return &adamw_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
