// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
#include "trireme/core/rng.h"

#include <cmath>

namespace trireme {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32);
  uint32_t c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(philox4x32(seed, stream, index)[0] >> 8) * (1.0f / 16777216.0f);
}

double rng_uniform_f64(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  uint64_t bits = (uint64_t(r[0]) << 21) ^ uint64_t(r[1]);  // 53 bits
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

double rng_normal_f64(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  // u1 in (0, 1] so log(u1) is finite.
  double u1 = (double(r[0]) + 1.0) / 4294967296.0;
  double u2 = double(r[1]) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  return float(rng_normal_f64(seed, stream, index));
}

uint64_t rng_stream_for(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace trireme
