// CPU optimizer kernels: AdamW in one pass over the elements, parallel over blocks of elements.
#include <cmath>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T>
void adamw_cpu(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWHyper& h) {
  using A = acc_t<T>;
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  A* m = exp_avg.data<A>();
  A* v = exp_avg_sq.data<A>();
  // Scalars rounded to A once, as PyTorch passes them to its A-typed in-place ops.
  const A decay = A(1.0 - h.lr * h.weight_decay);
  const A beta1 = A(h.beta1), one_minus_beta1 = A(1.0 - h.beta1);
  const A beta2 = A(h.beta2), one_minus_beta2 = A(1.0 - h.beta2);
  const A bc2_sqrt = A(std::sqrt(h.bias_correction2));
  const A eps = A(h.eps);
  const A neg_step_size = A(-(h.lr / h.bias_correction1));
  parallel_for(param.numel(), 16, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const A gi = A(g[i]);
      A pi = A(p[i]) * decay;
      const A mi = m[i] * beta1 + one_minus_beta1 * gi;
      const A vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const A denom = std::sqrt(vi) / bc2_sqrt + eps;
      pi += neg_step_size * (mi / denom);
      p[i] = T(pi);
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_optim) {
  registry.add_each<AdamWKernel, double, float, bf16_t, f16_t>("adamw", DeviceType::cpu,
                                                                []<class T>() { return &adamw_cpu<T>; });
}

}  // namespace trireme::cpu
