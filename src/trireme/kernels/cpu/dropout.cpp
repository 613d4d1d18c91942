// CPU inverted dropout: element i of contiguous x is kept, times 1 / (1 - p), iff
// rng_uniform(seed, stream, offset + i) >= p. The mask is a pure function of the counter, so
// elements run in parallel and the backward regenerates the same mask instead of saving it.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// rng_uniform(seed, stream, index) >= threshold, bit for bit (core/rng.cpp: Philox-4x32-10,
// then the top 24 bits of word 0 as a fraction), written inline and branch-free so that a loop
// over consecutive indices vectorises: the out-of-line call costs ~25 ns per element, which
// made dropout slower than the matmuls around it. Tests compare the masks with rng_uniform.
inline bool philox_keep(uint32_t k0, uint32_t k1, uint32_t c2, uint32_t c3, uint64_t index, uint32_t threshold) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (c0 >> 8) >= threshold;
}

template <class T>
void dropout_cpu(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset, Tensor& y) {
  using A = acc_t<T>;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const A scale = A(1.0 / (1.0 - p));
  // u = (bits >> 8) / 2^24 >= p  <=>  (bits >> 8) >= ceil(p * 2^24), exactly (p * 2^24 is exact
  // in double and u takes only multiples of 2^-24).
  const uint32_t threshold = uint32_t(std::ceil(p * 16777216.0));
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32), c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  parallel_for(x.numel(), 64, [&](int64_t b, int64_t e) {
    constexpr int64_t kBlock = 256;
    bool keep[kBlock];
    for (int64_t i0 = b; i0 < e; i0 += kBlock) {
      const int64_t n = std::min(kBlock, e - i0);
      for (int64_t i = 0; i < n; ++i) keep[i] = philox_keep(k0, k1, c2, c3, offset + uint64_t(i0 + i), threshold);
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
