// Data loader over a token array (see Note [global sample order] in data_loader.h).
#include "trireme/io/data_loader.h"

#include <bit>

#include "trireme/core/checked.h"
#include "trireme/core/error.h"
#include "trireme/core/rng.h"

namespace trireme::io {

uint64_t permute_index(uint64_t index, uint64_t n, uint64_t seed, uint64_t key) {
  TRIREME_CHECK(index < n, "permute_index: index ", index, " is not below n = ", n);
  if (n <= 1) return 0;
  // A balanced Feistel network on 2·half bits (the smallest even width covering n, so the
  // domain is < 4n) is a bijection for any round function; indices that land outside [0, n)
  // walk again until they land inside, which keeps it a bijection on [0, n).
  int bits = std::bit_width(n - 1);
  int half = (bits + 1) / 2;
  uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t stream = rng_stream_for("trireme.data_loader") ^ key;
  uint64_t x = index;
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t f = philox4x32(seed, stream, (round << 40) | right)[0] & mask;
      uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

DataLoader::DataLoader(std::vector<int32_t> tokens, int64_t block_size, uint64_t seed)
    : tokens_(std::move(tokens)), block_size_(block_size), seed_(seed) {
  TRIREME_CHECK(block_size_ >= 1, "data loader: block size must be >= 1, got ", block_size_);
  // Compared without forming block_size + 1, which overflows for block_size = INT64_MAX.
  TRIREME_CHECK(int64_t(tokens_.size()) > block_size_, "data loader: ", tokens_.size(),
                " tokens are too few for one window of block_size + 1 tokens (block_size = ", block_size_, ")");
}

DataLoader::DataLoader(std::vector<int32_t> tokens, std::vector<uint8_t> loss_mask, int64_t block_size, uint64_t seed)
    : tokens_(std::move(tokens)), loss_mask_(std::move(loss_mask)), packed_(true), block_size_(block_size), seed_(seed) {
  TRIREME_CHECK(block_size_ >= 1, "data loader: block size must be >= 1, got ", block_size_);
  const int64_t L = checked_add(block_size_, int64_t(1), "data loader: block_size + 1");
  TRIREME_CHECK(!tokens_.empty() && int64_t(tokens_.size()) % L == 0, "data loader: ", tokens_.size(),
                " tokens are not whole sequences of block_size + 1 = ", L, " tokens");
  TRIREME_CHECK(loss_mask_.size() == tokens_.size(), "data loader: ", loss_mask_.size(), " loss-mask entries for ",
                tokens_.size(), " tokens");
}

int64_t DataLoader::sample_start(int64_t global_sample) const {
  TRIREME_CHECK(global_sample >= 0, "data loader: negative sample index ", global_sample);
  uint64_t n = uint64_t(num_windows());
  uint64_t epoch = uint64_t(global_sample) / n, i = uint64_t(global_sample) % n;
  const int64_t k = int64_t(permute_index(i, n, seed_, epoch));
  return packed_ ? k * (block_size_ + 1) : k;
}

Batch DataLoader::samples(int64_t first, int64_t count) const {
  TRIREME_CHECK(first >= 0 && count >= 1, "data loader: bad sample range: first ", first, ", count ", count);
  checked_add(first, count, "data loader: the end of the sample range");
  const int64_t T = block_size_;
  Batch b{Tensor::empty({count, T}, DType::i64), Tensor::empty({count, T}, DType::i64)};
  int64_t* x = b.inputs.data<int64_t>();    // (count, T)
  int64_t* y = b.targets.data<int64_t>();   // (count, T)
  for (int64_t row = 0; row < count; ++row) {
    const int32_t* w = tokens_.data() + sample_start(first + row);
    for (int64_t t = 0; t < T; ++t) {
      x[row * T + t] = w[t];
      y[row * T + t] = w[t + 1];
      if (packed_ && !loss_mask_[size_t(w + t + 1 - tokens_.data())]) y[row * T + t] = -100;
    }
  }
  return b;
}

int64_t DataLoader::counted_targets(int64_t first, int64_t count) const {
  if (!packed_) return checked_mul(count, block_size_, "data loader: targets of a sample range");
  int64_t n = 0;
  for (int64_t row = 0; row < count; ++row) {
    const size_t start = size_t(sample_start(first + row));
    for (int64_t t = 1; t <= block_size_; ++t) n += loss_mask_[start + size_t(t)];
  }
  return n;
}

Batch DataLoader::batch(int64_t step, int64_t global_batch, int64_t rank, int64_t world) const {
  TRIREME_CHECK(step >= 0, "data loader: negative step ", step);
  TRIREME_CHECK(world >= 1 && rank >= 0 && rank < world, "data loader: rank ", rank, " is not in [0, ", world, ")");
  TRIREME_CHECK(global_batch >= 1 && global_batch % world == 0, "data loader: global batch ", global_batch,
                " does not divide evenly over ", world, " ranks");
  int64_t local = global_batch / world;
  const int64_t first = checked_add(checked_mul(step, global_batch, "data loader: the first sample of step ", step),
                                    rank * local, "data loader: the first sample of step ", step);
  return samples(first, local);
}

}  // namespace trireme::io
