// Philox-4x32-10's first output word and the dropout keep test, inline for host and device code,
// so the CUDA dropout draws the same mask as the CPU one bit for bit (core/rng.cpp holds the
// reference rounds; tests compare this against rng_uniform).
//
//   const uint32_t threshold = dropout_threshold(p);
//   bool keep = dropout_keep(philox_word0(seed, stream, offset + i), threshold);
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TRIREME_HOST_DEVICE __host__ __device__
#else
#define TRIREME_HOST_DEVICE
#endif

namespace trireme {

// Word 0 of philox4x32(seed, stream, index): counter (index, stream), key seed.
TRIREME_HOST_DEVICE inline uint32_t philox_word0(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
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
  return c0;
}

// rng_uniform = (word0 >> 8) / 2^24 >= p  <=>  (word0 >> 8) >= ceil(p * 2^24), exactly: p * 2^24
// is exact in double and the uniform takes only multiples of 2^-24.
inline uint32_t dropout_threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }
TRIREME_HOST_DEVICE inline bool dropout_keep(uint32_t word0, uint32_t threshold) { return (word0 >> 8) >= threshold; }

}  // namespace trireme
