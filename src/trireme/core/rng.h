// Counter-based random numbers (Philox-4x32-10): a value is a pure function of
// (seed, stream, index), so it never depends on thread count, device or parallel layout.
// Parameter init keys the stream by the parameter's name and the index by the element's
// position in the whole (unsharded) parameter; a shard then draws exactly its slice.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trireme {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t index);

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
