// FullyShardedParams: ZeRO-3's parameters, sharded over the data-parallel ranks like their
// gradients and optimizer state, and gathered only around the code that uses them.
//
// The parameters of each unit (a transformer block: ReducerOptions::units) move into one flat
// buffer with the layout of the unit's gradient bucket, so chunk k of the buffer is the chunk k
// of the bucket that dp rank k reduces and updates. Rank k keeps only that chunk (shard(u)),
// which ZeroOptimizer updates. The buffer's memory exists only while the unit is gathered
// (Note [released storage] in core/storage.h): run() all-gathers it before the unit's forward
// (the next unit's gather already in flight), releases it after, gathers it again when the
// backward reaches the unit (starting the previous unit's), and releases it once the backward
// has passed through. A rank thus holds whole parameters for two units at a time; what is not
// in a unit (the embeddings, the final norm and head) stays whole on every rank (ZeRO-2).
//
// Parameters that do not train (a LoRA run's frozen base weights: requires_grad false) have no
// gradient, so no bucket in the Reducer; a unit's frozen parameters get a flat buffer of their own,
// cut into dp chunks the same way and gathered and released with the unit's trained ones (a
// second all-gather), so that the frozen weights, the bulk of such a model, are sharded too.
//
//   Reducer reducer(model.named_parameters(), ctx.dp_group(), {.zero = 3, .units = blocks});
//   FullyShardedParams sharded(reducer);                       // parameters now sharded
//   ZeroOptimizer opt(reducer, adamw, &sharded);
//   y = sharded.run(u, x, [&](const Tensor& in) { return block_u(in); });
//   sharded.gather_all(); save(model); sharded.release_all();  // whole values for a checkpoint
#pragma once

#include <functional>
#include <vector>

#include "trireme/parallel/data_parallel.h"

namespace trireme::parallel {

class FullyShardedParams {
 public:
  // Takes over the parameters of `reducer`'s unit buckets (a ZeRO-3 Reducer): each becomes a
  // view of its unit's flat buffer, and every rank keeps its chunk. The parameters must have
  // the same values on every dp rank. With one dp rank nothing is sharded: the units stay
  // gathered and the shards are the whole buffers.
  // `frozen`: each unit's parameters without gradients (none: every parameter trains), sharded
  // alongside; the units are the Reducer's, in the same order.
  explicit FullyShardedParams(Reducer& reducer, const std::vector<std::vector<Tensor>>& frozen = {});
  ~FullyShardedParams();
  FullyShardedParams(const FullyShardedParams&) = delete;
  FullyShardedParams& operator=(const FullyShardedParams&) = delete;

  size_t num_units() const { return units_.size(); }
  // This rank's chunk of unit u's flat buffer (the bucket's layout): the values the optimizer
  // updates, gathered into the parameters by the unit's next gather.
  const Tensor& shard(size_t unit) const { return units_.at(unit).trained.shard; }

  void prefetch(size_t unit);  // starts the all-gather (nothing if gathered or under way)
  void gather(size_t unit);    // returns once unit's parameters hold their values
  void release(size_t unit);   // gives their memory back (nothing with one dp rank)
  void gather_all();           // collective over dp
  void release_all();
  // After the gathered parameters were written (a checkpoint loaded): each shard takes its chunk.
  void keep_gathered_values();

  // forward(x) as unit u: gathered for it and, when autograd records, gathered again when the
  // backward reaches it and released when the backward has passed it.
  Tensor run(size_t unit, const Tensor& x, const std::function<Tensor(const Tensor&)>& forward);

 private:
  // A flat buffer the parameters are views of, whose memory is released when not gathered, and
  // this rank's chunk of it.
  struct Flat {
    Tensor whole;
    Tensor shard;
    dist::WorkPtr gathering;
  };
  struct Unit {
    size_t bucket;
    Flat trained;  // the layout of the unit's gradient bucket: the shard is what the optimizer updates
    Flat frozen;   // parameters without gradients; undefined when none (or one dp rank)
    bool gathered = true;
  };
  void shard_frozen(Unit& unit, const std::vector<Tensor>& params);
  Reducer& reducer_;
  std::vector<Unit> units_;
  bool sharded_;  // more than one dp rank
};

}  // namespace trireme::parallel
