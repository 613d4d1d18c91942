// CPU optimizer kernels: AdamW in one pass over the elements, parallel over blocks of elements;
// the multi-tensor AdamW runs the same loop over chunks of every parameter; gradient clipping's
// scale of many tensors.
#include <cmath>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Scalars rounded to A once, as PyTorch passes them to its A-typed in-place ops.
template <class A>
struct AdamWScalars {
  A decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;

  explicit AdamWScalars(const AdamWHyper& h)
      : decay(A(1.0 - h.lr * h.weight_decay)),
        beta1(A(h.beta1)),
        one_minus_beta1(A(1.0 - h.beta1)),
        beta2(A(h.beta2)),
        one_minus_beta2(A(1.0 - h.beta2)),
        bc2_sqrt(A(std::sqrt(h.bias_correction2))),
        eps(A(h.eps)),
        neg_step_size(A(-(h.lr / h.bias_correction1))) {}
};

// Elements [begin, end) of one parameter: the one definition of the update both kernels run.
template <class T>
void adamw_range(T* p, const T* g, acc_t<T>* m, acc_t<T>* v, int64_t begin, int64_t end,
                 const AdamWScalars<acc_t<T>>& s) {
  using A = acc_t<T>;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const A gi = A(g[i]);
    A pi = A(p[i]) * s.decay;
    const A mi = m[i] * s.beta1 + s.one_minus_beta1 * gi;
    const A vi = v[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const A denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    pi += s.neg_step_size * (mi / denom);
    p[i] = T(pi);
  }
}

template <class T>
void adamw_cpu(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWHyper& h) {
  using A = acc_t<T>;
  const AdamWScalars<A> s(h);
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  A* m = exp_avg.data<A>();
  A* v = exp_avg_sq.data<A>();
  parallel_for(param.numel(), 16, [&](int64_t begin, int64_t end) { adamw_range<T>(p, g, m, v, begin, end, s); });
}

// Chunks of this many elements are the units the threads share: a parameter smaller than one is
// one chunk, so many small parameters spread over the threads too.
constexpr int64_t kAdamWChunk = 1 << 16;

template <class T>
void adamw_multi_cpu(std::span<const AdamWUpdate> updates) {
  using A = acc_t<T>;
  struct Chunk {
    size_t update;
    int64_t begin, end;
  };
  std::vector<AdamWScalars<A>> scalars;
  std::vector<Chunk> chunks;
  scalars.reserve(updates.size());
  for (size_t u = 0; u < updates.size(); ++u) {
    scalars.emplace_back(*updates[u].hyper);
    const int64_t n = updates[u].param->numel();
    for (int64_t b = 0; b < n; b += kAdamWChunk) chunks.push_back({u, b, std::min(n, b + kAdamWChunk)});
  }
  parallel_for(int64_t(chunks.size()), kAdamWChunk, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const Chunk& k = chunks[size_t(c)];
      const AdamWUpdate& u = updates[k.update];
      adamw_range<T>(u.param->data<T>(), u.grad->data<T>(), u.exp_avg->data<A>(), u.exp_avg_sq->data<A>(), k.begin,
                     k.end, scalars[k.update]);
    }
  });
}

template <class T>
void scale_many_cpu(std::span<Tensor* const> tensors, const Tensor& factor) {
  using A = acc_t<T>;
  const A f = A(*factor.data<double>());
  for (Tensor* t : tensors) {
    T* x = t->data<T>();
    parallel_for(t->numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) x[i] = T(A(x[i]) * f);
    });
  }
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_optim) {
  registry.add_each<AdamWKernel, double, float, bf16_t, f16_t>("adamw", DeviceType::cpu,
                                                                []<class T>() { return &adamw_cpu<T>; });
  registry.add_each<AdamWMultiKernel, double, float, bf16_t, f16_t>("adamw_multi", DeviceType::cpu,
                                                                     []<class T>() { return &adamw_multi_cpu<T>; });
  registry.add_each<ScaleManyKernel, double, float, bf16_t, f16_t>("scale_many", DeviceType::cpu,
                                                                    []<class T>() { return &scale_many_cpu<T>; });
}

}  // namespace trireme::cpu
