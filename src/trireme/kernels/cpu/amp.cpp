// CPU mixed-precision kernels: amp_unscale (multiply by 1/scale, flag inf/NaN; of one gradient or
// many), parallel over blocks of elements, each block keeping its own flag and setting the shared
// one once; and accumulate_widening.
#include <atomic>
#include <cmath>

#include "trireme/kernels/amp.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T>
void amp_unscale_cpu(Tensor& grad, Tensor& found_inf, double inv_scale) {
  using A = acc_t<T>;
  T* g = grad.data<T>();
  const A s = A(inv_scale);
  std::atomic<bool> found{false};
  parallel_for(grad.numel(), 4, [&](int64_t begin, int64_t end) {
    bool bad = false;
    for (int64_t i = begin; i < end; ++i) {
      const A x = A(g[i]);
      bad = bad || !std::isfinite(x);
      g[i] = T(x * s);
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  if (found.load()) found_inf.data<float>()[0] = 1.0f;
}

template <class T>
void amp_unscale_many_cpu(std::span<Tensor* const> grads, Tensor& found_inf, double inv_scale) {
  for (Tensor* g : grads) amp_unscale_cpu<T>(*g, found_inf, inv_scale);
}

template <class T>
void accumulate_widening_cpu(Tensor& acc, const Tensor& incoming) {
  float* a = acc.data<float>();
  const T* g = incoming.data<T>();
  parallel_for(acc.numel(), 4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += float(g[i]);
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_amp) {
  registry.add_each<AccumulateWideningKernel, bf16_t, f16_t>("accumulate_widening", DeviceType::cpu,
                                                             []<class T>() { return &accumulate_widening_cpu<T>; });
  registry.add_each<AmpUnscaleKernel, double, float, bf16_t, f16_t>("amp_unscale", DeviceType::cpu,
                                                                    []<class T>() { return &amp_unscale_cpu<T>; });
  registry.add_each<AmpUnscaleManyKernel, double, float, bf16_t, f16_t>(
      "amp_unscale_many", DeviceType::cpu, []<class T>() { return &amp_unscale_many_cpu<T>; });
}

}  // namespace trireme::cpu
