// The global gradient norm of a parallel run, counting every parameter element exactly once
// across the tensor-, pipeline- and data-parallel ranks, and clipping by it.
//
// Each GradPiece says how its gradient is spread:
//   tp_sharded: a tensor-parallel shard — the tp ranks hold different elements: sum over tp.
//               Otherwise the tp ranks hold identical copies: only tp rank 0 counts it.
//   dp_sharded: a ZeRO shard — the dp ranks hold different elements: sum over dp. Otherwise the
//               dp ranks hold the same averaged gradient: counted once.
// Pipeline stages hold different layers, so every stage's pieces are summed over pp (a weight
// shared by two stages, as a tied embedding, must be passed by one of them only).
//
//   auto pieces = grad_pieces(model.named_parameters(), model.shard_specs());
//   double norm = clip_global_grad_norm(pieces, /*max_norm=*/1.0, ctx);   // same on every rank
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/nn/module.h"
#include "trireme/parallel/shard.h"

namespace trireme::parallel {

class ParallelContext;

struct GradPiece {
  Tensor grad;  // scaled in place by clipping
  bool tp_sharded = false;
  bool dp_sharded = false;
  // false: another rank holds the same elements and counts them (a pipeline's second copy of a
  // tied weight); clipped like every piece, left out of the norm.
  bool counted = true;
};

// The pieces of whole (dp-replicated) parameters' gradients; those named in tp_specs (over more
// than one rank) are tp shards, those named in counted_elsewhere are not counted.
std::vector<GradPiece> grad_pieces(const nn::NamedTensors& params, const std::map<std::string, ShardSpec>& tp_specs,
                                   const std::set<std::string>& counted_elsewhere = {});

// sqrt of the sum of squares of every element once (accumulated in f64); the same on every rank.
double global_grad_norm(const std::vector<GradPiece>& pieces, const ParallelContext& ctx);
// Computes the global norm and, when it exceeds max_norm (> 0), scales every piece by
// max_norm / (norm + 1e-6) as optim::clip_grad_norm. Returns the norm before clipping.
double clip_global_grad_norm(const std::vector<GradPiece>& pieces, double max_norm, const ParallelContext& ctx);
// The same norm and clipping, bit for bit, with nothing read on the host: the norm is returned as
// a one-element f64 tensor on the gradients' device and the clip is applied by kernels (a factor
// of 1 when the norm is within max_norm), so that a traced step (graph/trace.h) can hold it.
// f32 and f64 gradients (a 16-bit gradient would round the factor where the eager clip does not).
Tensor clip_global_grad_norm_on_device(const std::vector<GradPiece>& pieces, double max_norm,
                                       const ParallelContext& ctx);

}  // namespace trireme::parallel
