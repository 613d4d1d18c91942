// The training data loader: fixed-length windows drawn from a token array in a seeded order
// that depends only on (seed, global sample index), never on how many processes read.
//
// Note [global sample order]
// A sample is a window of T + 1 tokens; the window starting at token p gives inputs
// tokens[p, p+T) and targets tokens[p+1, p+T+1]. There are N = L - T windows, one per start
// position. The run reads an endless stream of global samples k = 0, 1, 2, ...: sample k
// belongs to epoch e = k / N and takes the window at perm_e(k mod N), where perm_e is a
// pseudo-random permutation of [0, N) keyed by (seed, e) (a 4-round Feistel network over
// Philox, cycle-walked into range). So each epoch visits every window once, in a new order.
// Step s with global batch B reads samples [s·B, (s+1)·B); with W data-parallel ranks, rank r
// reads the contiguous slice [s·B + r·B/W, s·B + (r+1)·B/W). The ranks' slices together are
// exactly the world-size-1 batch, and resuming at step s only needs (seed, s).
//
//   DataLoader train(read_token_shard("out/data/train.bin").tokens, /*block_size=*/128, /*seed=*/1337);
//   Batch b = train.batch(step, /*global_batch=*/8, rank, world);  // b.inputs, b.targets: (8/world, 128) i64
#pragma once

#include <cstdint>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::io {

struct Batch {
  Tensor inputs;   // (b, T) i64
  Tensor targets;  // (b, T) i64, inputs shifted left by one token
};

// A pseudo-random permutation of [0, n) keyed by (seed, key), evaluated at one index in
// O(1) memory. Exposed for tests and for other deterministic shuffles.
uint64_t permute_index(uint64_t index, uint64_t n, uint64_t seed, uint64_t key);

// Note [packed sequences]
// Supervised fine-tuning (io/sft.h) gives the loader whole sequences instead of a stream: tokens
// is N sequences of block_size + 1 tokens laid end to end, and loss_mask says per token whether
// predicting it counts. Then there are N samples, sample k taking sequence perm_e(k mod N) as
// above, and a target whose mask is 0 is -100 (ignored by the cross-entropy).
class DataLoader {
 public:
  DataLoader(std::vector<int32_t> tokens, int64_t block_size, uint64_t seed);
  // Packed sequences (Note [packed sequences]): tokens.size() a positive multiple of block_size + 1
  // and loss_mask as long.
  DataLoader(std::vector<int32_t> tokens, std::vector<uint8_t> loss_mask, int64_t block_size, uint64_t seed);

  int64_t block_size() const { return block_size_; }
  uint64_t seed() const { return seed_; }
  int64_t num_tokens() const { return int64_t(tokens_.size()); }
  int64_t num_windows() const {
    return packed_ ? int64_t(tokens_.size()) / (block_size_ + 1) : int64_t(tokens_.size()) - block_size_;
  }

  // The start position of global sample k (see Note [global sample order]).
  int64_t sample_start(int64_t global_sample) const;

  // Samples [first, first + count) as one batch of `count` rows.
  Batch samples(int64_t first, int64_t count) const;
  // Packed sequences: the targets that count (loss mask 1) in samples [first, first + count);
  // otherwise every target counts (count x block_size).
  int64_t counted_targets(int64_t first, int64_t count) const;
  bool packed() const { return packed_; }
  // Rank `rank`'s slice of step `step`'s global batch; global_batch must divide by world.
  Batch batch(int64_t step, int64_t global_batch, int64_t rank = 0, int64_t world = 1) const;

 private:
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> loss_mask_;  // packed sequences only
  bool packed_ = false;
  int64_t block_size_;
  uint64_t seed_;
};

}  // namespace trireme::io
