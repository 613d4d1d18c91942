// Philox-4x32-10's first output word and the dropout keep test, inline for host and device code,
// so the CUDA dropout draws the same mask as the CPU one bit for bit (the rounds are core/rng.h's
// philox4x32_10; tests compare this against rng_uniform).
//
//   const uint32_t threshold = dropout_threshold(p);
//   bool keep = dropout_keep(philox_word0(seed, stream, offset + i), threshold);
#pragma once

#include <cmath>
#include <cstdint>

#include "trireme/core/rng.h"

namespace trireme {

// Word 0 of philox4x32(seed, stream, index): counter (index, stream), key seed.
TRIREME_HOST_DEVICE inline uint32_t philox_word0(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32_10(seed, stream, index).v[0];
}

// rng_uniform = (word0 >> 8) / 2^24 >= p  <=>  (word0 >> 8) >= ceil(p * 2^24), exactly: p * 2^24
// is exact in double and the uniform takes only multiples of 2^-24.
inline uint32_t dropout_threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }
TRIREME_HOST_DEVICE inline bool dropout_keep(uint32_t word0, uint32_t threshold) { return (word0 >> 8) >= threshold; }

}  // namespace trireme
