// Data parallelism: a Reducer that averages gradients over the data-parallel group in buckets,
// each launched asynchronously the moment its last gradient is ready, so the communication
// overlaps the rest of the backward pass.
//
// Buckets hold the parameters in reverse registration order (the order backward produces their
// gradients: the last layers first), cut every `bucket_bytes`. A parameter's gradient is moved
// into its bucket when its grad-ready hook fires and stays there as a view (p.grad() aliases the
// bucket), so later backwards accumulate into the bucket directly. Buckets are launched strictly
// in index order, which makes every rank issue the same collectives in the same order.
//
//   Reducer reducer(model.named_parameters(), ctx.dp_group(), {.bucket_bytes = 1 << 20});
//   for (int m = 0; m < micro_batches; ++m) {
//     reducer.prepare_backward(/*sync=*/m == micro_batches - 1);   // reduce once, on the last
//     (model.loss(x[m], y[m]) / double(micro_batches)).backward();
//   }
//   reducer.finish();                // waits for every bucket: p.grad() is the dp average
//   optimizer.step();
//   reducer.stats().hidden_fraction();   // the share of reduction time hidden behind backward
//
// Under ZeRO (zero >= 1) the buckets are padded to a multiple of the dp size and reduce-scattered
// instead: rank k receives the averaged chunk k of each bucket (shard_grad()), which ZeroOptimizer
// (zero.h) updates.
//   zero = 1  the buckets stay allocated (p.grad() holds this rank's own unreduced gradient, a
//             view of its bucket), and accumulation over micro-batches happens in them.
//   zero >= 2 a bucket exists only from its first gradient's arrival until its reduce-scatter
//             has finished: every backward reduce-scatters (into the shard gradients, summed over
//             micro-batches) and the parameters hold no gradient afterwards, so the whole
//             gradients never live at once (Note [ZeRO-2 buckets]).
// ZeRO-3 (fully_sharded.h) gives each unit of its parameters (a block) a bucket of its own
// (ReducerOptions::units), whose layout is also that of the unit's flat parameter buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "trireme/dist/process_group.h"
#include "trireme/nn/module.h"

namespace trireme::parallel {

// A parameter's place in a bucket (elements).
struct BucketSlot {
  size_t param = 0;    // index into the parameter list given to the Reducer
  int64_t offset = 0;  // first element in the bucket
  int64_t numel = 0;
};
struct BucketLayout {
  std::vector<BucketSlot> slots;  // in the order the gradients are expected (reverse registration)
  int64_t numel = 0;              // padded to a multiple of pad_to
  DType dtype = DType::f32;
  int unit = -1;                  // the unit (ReducerOptions::units) it holds, or -1
};
// Pure layout: params (numel, dtype) in registration order -> buckets. A bucket closes when the
// next parameter would take it past bucket_bytes (a parameter larger than that gets a bucket of
// its own) or has another dtype. Each bucket's numel is rounded up to a multiple of pad_to.
// `units` (parameter indices, each group of one dtype) get one bucket each, whatever their size,
// placed where their last parameter falls in reverse registration order.
std::vector<BucketLayout> assign_buckets(const std::vector<std::pair<int64_t, DType>>& params, int64_t bucket_bytes,
                                         int64_t pad_to = 1, const std::vector<std::vector<size_t>>& units = {});

struct ReducerOptions {
  int64_t bucket_bytes = 25 << 20;
  int zero = 0;  // the ZeRO stage: >= 1 reduce-scatters instead of all-reducing, >= 2 frees buckets
  std::vector<std::vector<size_t>> units;  // parameter groups with a bucket each (ZeRO-3's blocks)
  // Launch each bucket as soon as its gradients are ready (overlapping the backward pass), or
  // all of them at finish(): the same sums either way; false measures what overlap costs the
  // backward's kernels on a GPU, where the reductions share the SMs.
  bool overlap = true;
};

// Measured over the synchronising backward passes so far, in host time: exact on the CPU, where
// the host runs the backward. On a GPU the host queues the backward ahead of the device and
// "ended" means finish() was called, so most of a bucket's reduction counts as exposed even when
// the device ran it beside backward kernels (2 H200s, GPT-2 dp=2: hidden_fraction 0.16 at a
// scaling of 0.967); there the scaling is the measure, and a device timeline would be the tool.
struct ReducerStats {
  int64_t reductions = 0;       // synchronising backward passes
  double comm_seconds = 0;      // time the dp group spent reducing buckets
  double hidden_seconds = 0;    // the part of it before the backward pass ended (finish() called)
  double exposed_seconds = 0;   // time finish() waited after the backward pass ended
  double hidden_fraction() const { return comm_seconds > 0 ? hidden_seconds / comm_seconds : 0.0; }
};

class Reducer {
 public:
  // dp may be null or of size 1: then nothing is communicated (ZeRO still shards over 1 rank).
  Reducer(nn::NamedTensors params, dist::ProcessGroup* dp, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward pass: sync = false accumulates locally (a micro-batch that is not the
  // last), sync = true reduces during this backward. Under ZeRO-2/3 every backward reduces
  // (into the shard gradients): sync is ignored.
  void prepare_backward(bool sync = true);
  // After the synchronising backward: launches buckets whose gradients never arrived (unused
  // parameters count as zero) and waits for all of them.
  void finish();
  // Zeroes every gradient this Reducer holds (buckets, shard gradients) for the next step.
  void zero_grad();
  // Reduces the gradients the parameters hold now, accumulated by backwards that did not
  // synchronise (a pipeline step: Note [ZeRO inside a pipeline], train/parallel_runner.h), as
  // prepare_backward(true) + every gradient arriving at once + finish(). Nothing overlaps.
  void reduce_accumulated();

  const nn::NamedTensors& params() const { return params_; }
  const std::vector<BucketLayout>& buckets() const;
  dist::ProcessGroup* dp_group() const { return dp_; }
  int dp_size() const { return dp_ ? dp_->size() : 1; }
  int dp_rank() const { return dp_ ? dp_->rank() : 0; }
  int zero() const { return options_.zero; }
  // zero >= 1: this rank's averaged chunk of bucket b's gradients (numel / dp elements), after
  // finish() (summed over the step's backwards under ZeRO-2/3).
  const Tensor& shard_grad(size_t bucket) const;
  // Bucket b's flat buffer, which the parameters' gradients are views of (zero <= 1; under
  // ZeRO-2/3 it exists only while its gradients are in flight). zero = 1: once finish() has
  // reduce-scattered it, its contents are spent until the next zero_grad, and ZeroOptimizer
  // all-gathers the updated parameters through it instead of through a buffer of its own.
  const Tensor& bucket_buffer(size_t bucket) const;
  const ReducerStats& stats() const;
  void reset_stats();

  struct State;  // shared with the hooks and the completion watcher (data_parallel.cpp)

 private:
  nn::NamedTensors params_;
  dist::ProcessGroup* dp_;
  ReducerOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace trireme::parallel
