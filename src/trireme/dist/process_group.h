// Process groups: one API for collectives over tensors (Gloo for CPU tensors, NCCL for CUDA
// tensors). Every call takes an options struct and returns an async Work handle.
//
//   auto store = std::make_shared<StoreClient>(store_client_options(env));
//   auto world = std::make_shared<ProcessGroupGloo>(store, env.rank, env.world_size);
//   Tensor x = ...;                                           // contiguous, on the CPU
//   world->all_reduce(x, {.op = ReduceOp::sum})->wait();      // in place: x = sum over ranks
//   auto work = world->broadcast(x, {.root = 0});             // async: overlap, then
//   work->wait();                                             // rethrows the op's error
//
// Collectives work in place on the tensors passed (Tensor is a handle: the Work keeps the
// storage alive until the op is done). Every collective has a timeout: the option's, or the
// group's default when the option is zero. A peer that dies turns into an error on the
// survivors that names the op and the rank (Note [store liveness] in store.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::dist {

using std::chrono::milliseconds;

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// A timeout of zero means "the group's default timeout".
struct AllReduceOptions {
  ReduceOp op = ReduceOp::sum;
  milliseconds timeout{0};
};
struct BroadcastOptions {
  int root = 0;  // a rank of this group
  milliseconds timeout{0};
};
struct AllGatherOptions {
  milliseconds timeout{0};
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::sum;
  milliseconds timeout{0};
};
struct AllToAllOptions {
  milliseconds timeout{0};
};
struct SendRecvOptions {
  int tag = 0;  // matches a send with its recv between the same pair of ranks
  milliseconds timeout{0};
  // NCCL: start the transfer now, in an NCCL group of its own, instead of queueing it (Note [nccl
  // send/recv] in process_group_nccl.h). Other backends start every transfer at once anyway.
  bool alone = false;
};
struct BarrierOptions {
  milliseconds timeout{0};
};

// A handle to a collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  // Blocks until the op finishes and rethrows its error (a trireme::Error naming the op, the
  // ranks involved and the cause). With a nonzero timeout, throws if the op has not finished by
  // then (the op itself keeps its own timeout and still ends by it). NCCL differs: wait() makes
  // the caller's CUDA stream wait for the op without blocking the host, and a wait(timeout) that
  // runs out aborts the communicator (Note [nccl streams] in process_group_nccl.h).
  virtual void wait(milliseconds timeout = milliseconds(0)) = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Note [staged reduce-scatter]
// A reduce-scatter whose input is produced chunk by chunk (chunk j: what rank j keeps) need not
// wait for the whole input: chunk j can leave for rank j as soon as it is written, while the
// caller writes the rest. Tensor parallelism's row-parallel forward under sequence parallelism
// is the case (parallel/sp_linear.h): its GEMM computes the other ranks' rows first, sends them,
// and computes this rank's rows while they travel, so only the final sum waits.
//   auto rs = group.reduce_scatter_staged(out, in);
//   for each chunk j, this rank's last: write chunk j; if (j != rank) rs->chunk_written(j);
//   rs->finish()->wait();
// A long chunk may also leave in parts: chunk_part_written(j, end) says that its first `end`
// elements are written (end grows from call to call); chunk_written(j) still ends it.
// Each chunk is announced after the caller's stream has queued its writes; no other collective
// of the group may be issued between reduce_scatter_staged and finish (the peers take the ops in
// order). The result is reduce_scatter's, bit for bit. A backend that cannot start early does
// the whole op in finish(); sends_early() says which. Where adds_bias(), finish(bias, residual)
// also adds a bias to the result's rows (a row-parallel layer's) and then a residual of the
// result's shape, each rounded as a separate add would be, in the same pass as the sum;
// elsewhere both must be undefined. (The copy engines'
// version runs that last step on the caller's stream, which needs its result next.)
// A caller that adds its own chunk itself (inside a GEMM, as the GEMM's C operand: Note [the input
// gradient's sum in the GEMM], parallel/sp_linear.cpp) writes only the other ranks' chunks, then
// asks others_sum(): the sum of what the other ranks sent this rank, output's shape (with two
// ranks the arrived chunk itself, in the collective's staging memory; by default output, filled
// by a reduce-scatter in which this rank's chunk counts as zero), ready on the caller's stream.
// It stays valid until finish(), which must follow every read of it, adds nothing (bias and
// residual undefined) and leaves output to the caller.
class StagedReduceScatter {
 public:
  virtual ~StagedReduceScatter() = default;
  virtual bool sends_early() const = 0;
  virtual bool adds_bias() const { return false; }
  virtual void chunk_written(int rank) = 0;
  virtual void chunk_part_written(int /*rank*/, int64_t /*end*/) {}  // a backend that sends at finish ignores it
  virtual Tensor others_sum() = 0;
  virtual WorkPtr finish(const Tensor& bias = Tensor(), const Tensor& residual = Tensor()) = 0;
};

// Note [staged all-gather]
// The mirror image: an all-gather whose result is consumed rank by rank (a GEMM over the rows
// that came from rank q) can read each rank's input where it lands, without first copying it
// into the output; the output is completed afterwards, beside the work that reads it.
//   auto ag = group.all_gather_staged(out, in);    // starts at once
//   use(ag->arrived(q)) for each q                 // rank q's input; the caller's stream waits for it
//   WorkPtr done = ag->finish();                   // out, complete once done is waited for
// finish() must be called after the caller's stream has queued every read of the arrived()
// tensors, which are valid only until then (they may be the collective's own staging memory);
// no other collective of the group may be issued in between. arrived(rank) is `in` itself. A
// backend without staging does the whole all-gather at once: arrived(q) is then out's chunk q.
// `out` may be undefined when only the arrivals are wanted (a backend that needs a buffer
// makes its own). keep_others(others) (before finish()) copies the other ranks' inputs into
// `others` ((size - 1) input.numel() elements, in rank order without this rank's): for a caller
// that keeps its own input anyway, half the copying of a whole output at tp = 2.
class StagedAllGather {
 public:
  virtual ~StagedAllGather() = default;
  virtual Tensor arrived(int rank) = 0;
  virtual void keep_others(const Tensor& others) = 0;
  virtual WorkPtr finish() = 0;
};

class ProcessGroup {
 public:
  // global_ranks[i]: the job-wide rank of this group's rank i (empty: the identity).
  ProcessGroup(int rank, int size, std::vector<int> global_ranks = {});
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank(int group_rank) const { return global_ranks_.at(static_cast<size_t>(group_rank)); }
  virtual std::string backend_name() const = 0;
  // "rank 1 of 4 (gloo group 'world')": how errors name where they happened.
  std::string describe_rank(int group_rank) const;

  // x = op over ranks of x.
  virtual WorkPtr all_reduce(const Tensor& tensor, const AllReduceOptions& options = {});
  // tensor = root's tensor.
  virtual WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& options = {});
  // output (size() * input.numel() elements) = concatenation of every rank's input, in rank order.
  virtual WorkPtr all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options = {});
  // The same op, its arrivals read in place (Note [staged all-gather]). By default the whole
  // all-gather runs at once and arrived(q) waits for it.
  virtual std::unique_ptr<StagedAllGather> all_gather_staged(const Tensor& output, const Tensor& input,
                                                             const AllGatherOptions& options = {});
  // output (input.numel() / size() elements) = this rank's chunk of op over ranks of input.
  virtual WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, const ReduceScatterOptions& options = {});
  // The same op, its input announced chunk by chunk (Note [staged reduce-scatter]). By default
  // nothing starts early and finish() calls reduce_scatter.
  virtual std::unique_ptr<StagedReduceScatter> reduce_scatter_staged(const Tensor& output, const Tensor& input,
                                                                     const ReduceScatterOptions& options = {});
  // Equal splits: input and output hold size() chunks of input.numel() / size() elements each;
  // chunk j of this rank's input goes to rank j, and chunk j of the output comes from rank j.
  virtual WorkPtr all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options = {});
  virtual WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& options = {});
  virtual WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& options = {});
  virtual WorkPtr barrier(const BarrierOptions& options = {});

  // A group of some of this group's ranks (listed as ranks of this group, in the new group's
  // rank order). Called by the members only; `name` must be the same on all of them and
  // unique among the groups they create.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name);

 protected:
  // Throws "backend X does not support Y".
  [[noreturn]] void unsupported(const std::string& what) const;
  // The operand checks every backend's collectives share (errors name the backend and the op):
  // one dtype, and output = size() x input (all_gather), input = size() x output
  // (reduce_scatter), or equal sizes in size() chunks and separate memory (all_to_all).
  void check_all_gather_operands(const Tensor& output, const Tensor& input) const;
  void check_reduce_scatter_operands(const Tensor& output, const Tensor& input) const;
  void check_all_to_all_operands(const Tensor& output, const Tensor& input) const;

  int rank_;
  int size_;
  std::vector<int> global_ranks_;
};

}  // namespace trireme::dist
