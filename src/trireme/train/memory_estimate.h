// What a training run holds in memory, per process, before anything is allocated: the numbers
// behind `trireme estimate` and the check that refuses a run that cannot fit (memory_check.h).
//
// Per process, in bytes (f32 parameters; the activations in the dtype autocast computes in):
//   weights        the parameters this process holds (its tp slice of its pipeline stage), f32 —
//                  also the master weights under bf16/f16 autocast; ZeRO-3: 1/dp of each block,
//                  plus two whole blocks
//   gradients      one f32 gradient per parameter (the data-parallel Reducer's buckets are these);
//                  ZeRO-2/3 with one stage: the buckets in flight
//   optimizer      AdamW's m and v or SGD's momentum, over dp with ZeRO
//   activations    what the forward keeps for the backward, for every micro-batch in flight on
//                  this stage under its schedule (recomputed blocks keep only their input, and one
//                  of them replays at a time; under autocast the GEMMs' 16-bit weight casts too),
//                  plus the logits of the last stage and a block backward's working set
//   communication  ZeRO's shard gradients, the activations and gradients a pipeline stage
//                  sends and receives
// The peak: weights + optimizer + communication + gradients and activations, summed where the
// gradients live through the forward (a data-parallel Reducer, accumulation over micro-batches)
// and else the larger of the two (the backward frees activations as it makes gradients).
//
//   std::vector<MemoryEstimate> ranks = estimate_training_memory_per_rank(cfg, vocab);   // one per rank
//   double worst = estimate_training_memory(cfg, vocab).total();                         // the largest
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

// Bytes of one process, as doubles (the inputs may be absurd; nothing here can overflow).
struct MemoryEstimate {
  int rank = 0, dp_rank = 0, tp_rank = 0, pp_rank = 0;
  double parameters = 0;           // elements held by this process
  double weight_bytes = 0;
  double gradient_bytes = 0;
  double optimizer_bytes = 0;
  double activation_bytes = 0;
  double communication_bytes = 0;
  // The activations still alive when the gradients are at their largest. All of them when the
  // gradients live through the forward: a data-parallel Reducer's buckets are allocated once and
  // kept, and accumulation over micro-batches keeps the first ones' gradients while the next
  // forwards run. None when the backward frees activations as it makes gradients and the two
  // take turns (one process). Under ZeRO-2/3 the blocks' but not the logits: the first bucket
  // fills once the head's backward has freed those.
  double activations_beside_gradients = 0;
  double total() const {
    return weight_bytes + optimizer_bytes + communication_bytes +
           std::max(activation_bytes, activations_beside_gradients + gradient_bytes);
  }
};

// The vocabulary size the estimates (and the planner) assume: vocab_size when it is known (> 0),
// else data.bpe_vocab_size for BPE and 256 for characters (a lower bound).
int64_t vocab_or_assumed(const io::TrainConfig& cfg, int64_t vocab_size);
// Every process of a training run of `cfg`, in world-rank order (the mesh is (dp, pp, tp), tp
// fastest). vocab_size <= 0 means not known yet (vocab_or_assumed).
std::vector<MemoryEstimate> estimate_training_memory_per_rank(const io::TrainConfig& cfg, int64_t vocab_size);
// The process that needs the most.
MemoryEstimate estimate_training_memory(const io::TrainConfig& cfg, int64_t vocab_size);
// Sampling one sequence of up to block_size tokens: the weights and a forward's activations.
MemoryEstimate estimate_inference_memory(const models::GPTConfig& cfg);

}  // namespace trireme::train
