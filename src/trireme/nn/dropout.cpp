// Dropout layer and its stream derivation.
#include "trireme/nn/dropout.h"

#include "trireme/core/rng.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::nn {

namespace {
// splitmix64's finaliser: spreads consecutive counters over the whole 64-bit range.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t dropout_stream(const std::string& qualified_name, uint64_t counter) {
  return mix64(rng_stream_for(qualified_name) ^ mix64(counter));
}

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  TRIREME_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  const uint64_t stream = dropout_stream(qualified_name(), next_rng_counter());
  return dropout(x, p, true, rng_seed(), stream, 0);
}

}  // namespace trireme::nn
