// CUDA optimizer kernels: AdamW in one pass over the elements, the twin of kernels/cpu/optim.cpp
// (same order of operations and the same scalars rounded once to the state type; m and v are f32
// for bf16/f16 parameters, which are updated in f32 and rounded once).
#include <cmath>

#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class A>
struct AdamWScalars {
  A decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
};

template <class D>
__global__ void adamw_kernel(D* p, const D* g, dacc_t<D>* m, dacc_t<D>* v, int64_t n, AdamWScalars<dacc_t<D>> s) {
  using A = dacc_t<D>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const A gi = to_acc(g[i]);
    A pi = to_acc(p[i]) * s.decay;
    const A mi = m[i] * s.beta1 + s.one_minus_beta1 * gi;
    const A vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const A denom = m_sqrt(vi) / s.bc2_sqrt + s.eps;
    pi += s.neg_step_size * (mi / denom);
    p[i] = from_acc<D>(pi);
  }
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
  LaunchContext ctx(param);
  adamw_kernel<D><<<grid_for(n), kBlock, 0, ctx.stream>>>(dptr<T>(param), dptr<T>(grad), exp_avg.data<A>(),
                                                          exp_avg_sq.data<A>(), n, s);
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_optim) {
  registry.add_each<AdamWKernel, double, float, bf16_t, f16_t>("adamw", DeviceType::cuda,
                                                                []<class T>() { return &adamw_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
