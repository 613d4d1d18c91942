// Replica check: data-parallel replicas must hold bit-identical parameters after every step (they
// apply the same averaged gradients, or ZeRO-1 all-gathers the same shards). Anything that breaks
// that — a nondeterministic kernel, a faulty GPU or host memory, a bug in a reduction — would
// otherwise go unnoticed: each replica keeps training its own model and the checkpoint (written
// from dp rank 0) silently differs from what the other replicas computed.
//
// check_replicas_agree hashes the bytes of every parameter on each dp rank (64 bits each; the
// parameters are copied to the host first when they live on a GPU) and all-gathers the hashes
// over the dp group; every rank then finds the same first mismatch and throws the same error,
// naming the parameter and the ranks, so the job stops rather than hangs.
//
//   parallel::check_replicas_agree(model.named_parameters(), ctx, step);  // every dp rank together
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/parallel/context.h"

namespace trireme::parallel {

using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// A 64-bit hash of a tensor's bytes (its contiguous host copy): equal tensors hash equal.
uint64_t tensor_bytes_hash(const Tensor& t);

// Collective over ctx.dp_group() (a no-op with dp = 1). Throws trireme::Error when a parameter's
// hash differs between dp ranks: "replica check after step <step>: parameter '<name>' differs
// between the data-parallel replicas: dp rank 0 (rank 0) ... dp rank 1 (rank 2) ...".
// `params` must be the same names in the same order on every dp rank (the replicas' models).
void check_replicas_agree(const NamedParameters& params, const ParallelContext& ctx, int64_t step);

// Test seam: when set, called with this rank's parameters just before they are hashed, so a
// test can perturb one rank and see the check catch it. Unset (and never set) in the trainer.
using ReplicaCheckHook = std::function<void(const ParallelContext& ctx, int64_t step, const NamedParameters& params)>;
void set_replica_check_hook(ReplicaCheckHook hook);

}  // namespace trireme::parallel
