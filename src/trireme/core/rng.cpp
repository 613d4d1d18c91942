// Distributions over the Philox counters of rng.h.
#include "trireme/core/rng.h"

#include <cmath>

namespace trireme {
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
