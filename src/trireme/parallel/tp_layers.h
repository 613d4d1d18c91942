// Tensor-parallel layers: column- and row-parallel linear layers, a vocabulary-parallel embedding
// and the vocabulary-parallel cross-entropy, each parameter declaring its ShardSpec.
//
// Column-parallel:  Y = X A + b with A = [A_1 … A_p] split along the output dim (and b alike).
//   Rank r holds A_r and computes Y_r = X A_r + b_r: its columns of Y, no communication forward.
//   X enters through copy_to_tp_region, whose backward all-reduces dX = Σ_r dY_r A_rᵀ.
// Row-parallel:     Y = X A + b with A = [A_1; …; A_p] split along the input dim, X = [X_1 … X_p]
//   arriving already split (a column-parallel output). Rank r computes X_r A_r, a partial sum;
//   reduce_from_tp_region adds them (Y = Σ_r X_r A_r), then the replicated b is added once.
// A column-parallel layer feeding a row-parallel one (attention: q, k, v then the output
// projection; MLP: c_fc then c_proj) thus costs one all-reduce forward and one backward.
//
// trireme's Linear stores W (out, in) with Y = X Wᵀ, so "split the output dim" cuts W's rows
// (ShardSpec dim 0) and "split the input dim" cuts W's columns (dim 1).
//
//   TpGroup tp = TpGroup::of(ctx);
//   auto fc = std::make_shared<ColumnParallelLinear>(768, 3072, tp);   // weight (3072/p, 768)
//   auto proj = std::make_shared<RowParallelLinear>(3072, 768, tp);    // weight (768, 3072/p)
//   Tensor y = proj->forward(gelu(fc->forward(x)));                    // x, y (B, T, 768) replicated
//   for (auto& [name, spec] : collect_shard_specs(model)) ...;          // "h.0.mlp.c_fc.weight" -> dim 0
#pragma once

#include <map>
#include <string>

#include "trireme/nn/module.h"
#include "trireme/parallel/shard.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::parallel {

class LoraAdapter;  // parallel/lora.h
struct LoraOptions;

// A module whose parameters may be shards: it records their specs under their local names.
// Parameters without a spec are replicated over the tensor-parallel group.
class TensorParallelModule : public nn::Module {
 public:
  using nn::Module::Module;
  const std::map<std::string, ShardSpec>& shard_specs() const { return shard_specs_; }

 protected:
  Tensor register_shard(const std::string& name, const ShardSpec& spec, DType dtype);

 private:
  std::map<std::string, ShardSpec> shard_specs_;
};

// Every sharded parameter of the tree under root, by qualified name (as named_parameters()).
std::map<std::string, ShardSpec> collect_shard_specs(nn::Module& root);

struct ColumnParallelOptions {
  bool bias = true;
  int64_t blocks = 1;        // the output dim is `blocks` equal parts, each split (fused q|k|v: 3)
  bool pad = false;          // pad the output dim to a multiple of tp (a vocabulary)
  DType dtype = DType::f32;
};

class ColumnParallelLinear : public TensorParallelModule {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, TpGroup tp, ColumnParallelOptions options = {});
  // x (..., in) replicated -> (..., out_local): this rank's output columns (not gathered).
  Tensor forward(const Tensor& x) const;
  // nn::Linear's default, U(-1/sqrt(in), 1/sqrt(in)), drawn for the full parameter.
  void reset_parameters(uint64_t seed) override;
  // Adds a LoRA adapter (parallel/lora.h), registered as child "lora"; forward then adds its output.
  void add_lora(const LoraOptions& options);

  int64_t in_features, out_features, out_local, blocks;
  TpGroup tp;
  Tensor weight;  // (out_local, in), ShardSpec dim 0
  Tensor bias;    // (out_local), ShardSpec dim 0; or undefined
  std::shared_ptr<LoraAdapter> lora;  // or null
};

class RowParallelLinear : public TensorParallelModule {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, TpGroup tp, bool bias = true,
                    DType dtype = DType::f32);
  // x (..., in_local), this rank's input columns -> (..., out) replicated.
  Tensor forward(const Tensor& x) const;
  // forward in two parts, for callers that give the all-reduce other work to run beside:
  // start() queues the GEMM and starts the sum of its output (work: null when nothing is
  // communicated); finish() makes later work wait for the sum and adds the bias (with one rank
  // the GEMM adds it).
  //   dist::WorkPtr w;
  //   Tensor y = c_proj.start(x, w);   // y is being summed: do not read it yet
  //   ...                              // other work
  //   y = c_proj.finish(y, w);
  Tensor start(const Tensor& x, dist::WorkPtr& work) const;
  Tensor finish(const Tensor& y, const dist::WorkPtr& work) const;
  void reset_parameters(uint64_t seed) override;
  // Adds a LoRA adapter (parallel/lora.h), registered as child "lora": its share joins the partial
  // sum before the reduce.
  void add_lora(const LoraOptions& options);

  int64_t in_features, out_features, in_local;
  TpGroup tp;
  Tensor weight;  // (out, in_local), ShardSpec dim 1
  Tensor bias;    // (out), replicated; or undefined
  std::shared_ptr<LoraAdapter> lora;  // or null

 private:
};

// The embedding table split by vocabulary rows: rank r holds rows [r V_p/p, (r+1) V_p/p) of the
// table padded to V_p = round_up(V, p) rows (padding rows are zero and no id reaches them). A rank
// looks up the ids it owns, writes zeros for the others, and the all-reduce of
// reduce_from_tp_region assembles the full lookup.
class VocabParallelEmbedding : public TensorParallelModule {
 public:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t dim, TpGroup tp, DType dtype = DType::f32);
  Tensor forward(const Tensor& ids) const;  // (...) integer -> (..., dim) replicated
  // This rank's part of forward before the sum over the group: its own rows, zeros elsewhere.
  Tensor forward_partial(const Tensor& ids) const;
  void reset_parameters(uint64_t seed) override;  // N(0, 1) as nn::Embedding

  int64_t num_embeddings, dim;
  int64_t vocab_start;  // the first full-vocabulary id of this rank's rows
  int64_t vocab_real;   // how many of this rank's rows are real ids (the rest are padding)
  TpGroup tp;
  Tensor weight;        // (V_p / p, dim), ShardSpec dim 0, padded
};

// The vocabulary range a rank's logits cover: columns [0, real) of its logits are the ids
// [start, start + real); further columns are padding and never count.
struct VocabShard {
  int64_t start = 0;
  int64_t real = 0;
  int64_t vocab_size = 0;  // the full (unpadded) vocabulary
  static VocabShard of(const ShardSpec& spec);  // for a dim-0 shard of a (V, ...) parameter
};

// Mean cross-entropy of the full-vocabulary softmax from each rank's slice of the logits, without
// ever gathering them: the row max and the sum of exponentials are all-reduced (two all-reduces of
// N numbers), and the target logit is contributed by the rank that owns the target. Targets equal
// to ignore_index count for nothing (all ignored: the loss is 0). The backward needs no
// communication: dL/dlogits_r = (softmax_r - onehot_r) / count on each rank's columns.
//   logits (N, V_local) this rank's columns; targets (N) i64/i32 full-vocabulary ids.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const VocabShard& shard,
                                    const TpGroup& tp, int64_t ignore_index = -100);

// Dropout of a tensor-parallel shard that draws the same mask as dropout() of the full tensor:
// x is columns [column_offset, column_offset + x.size(-1)) of a full tensor whose last dim is
// full_last_dim (rows are the leading dims flattened). With column_offset 0 and full_last_dim ==
// x.size(-1) it is dropout(x, p, training, seed, stream, offset) exactly.
Tensor tp_dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, int64_t full_last_dim,
                  int64_t column_offset, uint64_t offset = 0);

}  // namespace trireme::parallel
