// Counter-based random numbers (Philox-4x32-10): a value is a pure function of
// (seed, stream, index), so it never depends on thread count, device or parallel layout.
// Parameter init keys the stream by the parameter's name and the index by the element's
// position in the whole (unsharded) parameter; a shard then draws exactly its slice.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

// Host and device (CUDA kernels include this header too).
#ifndef TRIREME_HOST_DEVICE
#if defined(__CUDACC__)
#define TRIREME_HOST_DEVICE __host__ __device__
#else
#define TRIREME_HOST_DEVICE
#endif
#endif

namespace trireme {

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
// counter (index, stream), key seed. Inline and branch-free so that kernels drawing one value per
// element (dropout) vectorise on the CPU and run per thread on the GPU, bit-identical on both.
struct Philox4 {
  uint32_t v[4];
};
TRIREME_HOST_DEVICE inline Philox4 philox4x32_10(uint64_t seed, uint64_t stream, uint64_t index) {
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
    k0 += 0x9E3779B9u;  // Weyl sequence constants of the key schedule
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

inline std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  Philox4 r = philox4x32_10(seed, stream, index);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

// Uniform in [0, 1) with 24 random bits; standard normal by Box-Muller over one Philox block.
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform_f64(uint64_t seed, uint64_t stream, uint64_t index);
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
double rng_normal_f64(uint64_t seed, uint64_t stream, uint64_t index);

// A stable 64-bit stream id for a name (FNV-1a), e.g. a parameter's qualified name.
uint64_t rng_stream_for(std::string_view name);

// A generator is a seed and an offset; each draw reserves a range of counters so that
// successive calls give fresh numbers. Its state is two integers, so checkpoints save it.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Returns the first counter of a fresh range of n counters.
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t stream_;
  uint64_t offset_ = 0;
};

}  // namespace trireme
