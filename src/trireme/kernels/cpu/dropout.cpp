// CPU inverted dropout: element i of contiguous x is kept, times 1 / (1 - p), iff
// rng_uniform(seed, stream, offset + i) >= p. The mask is a pure function of the counter, so
// elements run in parallel and the backward regenerates the same mask instead of saving it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/philox.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T>
void dropout_cpu(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset, Tensor& y) {
  using A = acc_t<T>;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const A scale = A(1.0 / (1.0 - p));
  const uint32_t threshold = dropout_threshold(p);
  parallel_for(x.numel(), 64, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 256;
    bool keep[kBlock];
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      const int64_t n = std::min(kBlock, e - i0);
      // The same draw as rng_uniform(seed, stream, index) >= p, bit for bit, through the inline
      // Philox so the loop vectorises (an out-of-line call per element cost ~25 ns).
      for (int64_t i = 0; i < n; ++i) keep[i] = dropout_keep(philox_word0(seed, stream, offset + uint64_t(i0 + i)), threshold);
      for (int64_t i = 0; i < n; ++i) py[i0 + i] = keep[i] ? T(A(px[i0 + i]) * scale) : T(A(0));
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_dropout) {
  registry.add_each<DropoutKernel, double, float, bf16_t, f16_t>(
      "dropout", DeviceType::cpu, []<class T>() { return &dropout_cpu<T>; });
}

}  // namespace trireme::cpu
