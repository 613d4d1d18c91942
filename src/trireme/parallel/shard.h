// ShardSpec: how a tensor-parallel parameter is cut from the single-process one, and the slicing,
// reassembly and layout-independent initialisation that follow from it.
//
// A sharded parameter keeps its single-process name; its spec says which slice of the full
// parameter this rank holds, so a checkpoint can be saved whole (gather_shards) and loaded into
// any layout (shard_of). The dim `dim` of the full parameter is cut as follows:
//
//   blocks == 1:  [ r0 | r1 | ... | r(p-1) ]             rank r holds rows [r L, (r+1) L)
//   blocks == 3:  [ q: r0 | r1 ][ k: r0 | r1 ][ v: r0 | r1 ]   (fused q|k|v, p = 2)
//                 rank r holds q_r | k_r | v_r, each a contiguous block of the full dim
//   padded:       the dim is first padded with zero rows up to a multiple of p (a vocabulary that
//                 p does not divide); rows past the full size are padding, held as zeros.
//
//   ShardSpec s{.dim = 0, .size = 2, .rank = 1, .full_shape = {61, 32}};   // 61 rows over 2 ranks
//   shard_shape(s);             // {31, 32}: rows 31..61 of the full table, the last one padding
//   Tensor mine = shard_of(full, s);                 // full (61, 32) -> this rank's (31, 32)
//   Tensor whole = gather_shards(mine, s, tp_group); // every rank's shard -> (61, 32)
//   init_shard_normal(mine, s, 0.02, seed, "transformer.wte.weight");  // == shard_of(full init)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/process_group.h"

namespace trireme::parallel {

struct ShardSpec {
  int dim = 0;             // the cut dim of the full parameter
  int size = 1;            // ranks sharing it (the tensor-parallel size)
  int rank = 0;            // this rank's place among them
  Shape full_shape;        // the single-process parameter's shape (unpadded)
  int64_t blocks = 1;      // dim = `blocks` equal parts, each cut over the ranks (fused q|k|v: 3)
  bool pad = false;        // pad dim to a multiple of size (blocks must be 1); else size must divide it

  int64_t full_length() const { return full_shape.at(size_t(dim)); }
  // The dim's length after padding (== full_length() without padding).
  int64_t padded_length() const;
  // The length of this rank's shard along dim (the same on every rank).
  int64_t shard_length() const;
  // "dim 0 of [61, 32] over 2 ranks (rank 1), padded to 62": for errors and logs.
  std::string str() const;
};

// Rounds n up to a multiple of m: the padded vocabulary is round_up(V, tp).
inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The shard's shape: full_shape with dim replaced by shard_length().
Shape shard_shape(const ShardSpec& spec);

// A run of real (non-padding) rows of the shard: rows [local, local + length) of the shard are
// rows [full, full + length) of the full parameter along spec.dim.
struct ShardPiece {
  int64_t local = 0, full = 0, length = 0;
};
// The pieces of this rank's shard, in order (one per block; none when the shard is all padding).
std::vector<ShardPiece> shard_pieces(const ShardSpec& spec);

// This rank's shard of a full tensor (a fresh contiguous copy; padding rows are zero).
Tensor shard_of(const Tensor& full, const ShardSpec& spec);
// The full tensor from every rank's shard (shards[r] is rank r's), dropping padding.
Tensor unshard(const std::vector<Tensor>& shards, const ShardSpec& spec);
// unshard over a process group: every rank gets the full tensor (a collective on `group`).
Tensor gather_shards(const Tensor& shard, const ShardSpec& spec, dist::ProcessGroup* group);

// The ShardSpec of a parameter (by single-process name) on tp rank `tp_rank`; nullopt when the
// parameter is replicated over tp. A model states its own (models::gpt_shard_rule).
using ShardRule = std::function<std::optional<ShardSpec>(const std::string& name, int tp_rank)>;

// Initialisation of a shard as the same slice of the full parameter initialised by nn/init.h
// under `name` (the full parameter's qualified name); padding rows are set to zero.
void init_shard_normal(Tensor& shard, const ShardSpec& spec, double std, uint64_t seed, const std::string& name);
void init_shard_uniform(Tensor& shard, const ShardSpec& spec, double low, double high, uint64_t seed,
                        const std::string& name);

}  // namespace trireme::parallel
