// CPU inverted dropout: element i of contiguous x is kept, times 1 / (1 - p), iff
// rng_uniform(seed, stream, offset + i) >= p. The mask is a pure function of the counter, so
// elements run in parallel and the backward regenerates the same mask instead of saving it.
#include "trireme/core/rng.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T>
void dropout_cpu(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset, Tensor& y) {
  using A = acc_t<T>;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const A scale = A(1.0 / (1.0 - p));
  // rng_uniform has 24 bits: compare in double so p is not rounded to float first.
  parallel_for(x.numel(), 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const bool keep = double(rng_uniform(seed, stream, offset + uint64_t(i))) >= p;
      py[i] = keep ? T(A(px[i]) * scale) : T(A(0));
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_dropout) {
  registry.add_each<DropoutKernel, double, float, bf16_t, f16_t>(
      "dropout", DeviceType::cpu, []<class T>() { return &dropout_cpu<T>; });
}

}  // namespace trireme::cpu
