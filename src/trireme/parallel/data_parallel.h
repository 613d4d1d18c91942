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
// With zero1 the buckets are padded to a multiple of the dp size and reduce-scattered instead:
// rank k receives the averaged chunk k of each bucket (shard_grad()), which ZeroOptimizer
// (zero.h) updates; p.grad() then holds this rank's own unreduced gradient.
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
};
// Pure layout: params (numel, dtype) in registration order -> buckets. A bucket closes when the
// next parameter would take it past bucket_bytes (a parameter larger than that gets a bucket of
// its own) or has another dtype. Each bucket's numel is rounded up to a multiple of pad_to.
std::vector<BucketLayout> assign_buckets(const std::vector<std::pair<int64_t, DType>>& params, int64_t bucket_bytes,
                                         int64_t pad_to = 1);

struct ReducerOptions {
  int64_t bucket_bytes = 25 << 20;
  bool zero1 = false;  // reduce-scatter (ZeRO stage 1) instead of all-reduce
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
  // dp may be null or of size 1: then nothing is communicated (zero1 still shards over 1 rank).
  Reducer(nn::NamedTensors params, dist::ProcessGroup* dp, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward pass: sync = false accumulates locally (a micro-batch that is not the
  // last), sync = true reduces during this backward.
  void prepare_backward(bool sync = true);
  // After the synchronising backward: launches buckets whose gradients never arrived (unused
  // parameters count as zero) and waits for all of them.
  void finish();
  // Reduces the gradients the parameters hold now, accumulated by backwards that did not
  // synchronise (a pipeline step: Note [ZeRO inside a pipeline], train/parallel_runner.h), as
  // prepare_backward(true) + every gradient arriving at once + finish(). Nothing overlaps.
  void reduce_accumulated();

  const nn::NamedTensors& params() const { return params_; }
  const std::vector<BucketLayout>& buckets() const;
  dist::ProcessGroup* dp_group() const { return dp_; }
  int dp_size() const { return dp_ ? dp_->size() : 1; }
  int dp_rank() const { return dp_ ? dp_->rank() : 0; }
  bool zero1() const { return options_.zero1; }
  // zero1: this rank's averaged chunk of bucket b's gradients (numel / dp elements), after finish().
  const Tensor& shard_grad(size_t bucket) const;
  // Bucket b's flat buffer, which the parameters' gradients are views of. zero1: once finish()
  // has reduce-scattered it, its contents are spent until the next zero_grad, and ZeroOptimizer
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
