// PeerAllReduce: the all-reduce of a GPU group whose ranks share one host, moved by the GPUs'
// copy engines over NVLink instead of by NCCL's kernels. ProcessGroupNccl uses it for the
// sums and averages of floating-point tensors of 2-rank groups when both ranks can
// (NcclOptions::peer_all_reduce turns it off, or also allows groups of 3 to 8 ranks, unmeasured;
// dist/peer_all_reduce_mode.h); everything else goes to NCCL. The staging slot is
// NcclOptions::peer_slot_bytes (32 MiB).
//
// Note [peer all-reduce]
// NCCL's all-reduce is a kernel: its CTAs take SMs, so beside a GEMM that holds every SM it
// either waits for them or slows the GEMM down (both were measured: tensor parallelism's
// backward all-reduce "overlapped but not hidden"; carving SMs out of the GEMMs, or splitting
// the forward's GEMM into chunks so their all-reduces overlap, made the step slower). The copy
// engines are idle during training, move data between two H200s at ~394 GB/s (NCCL's
// all-reduce: ~238 GB/s of bus bandwidth), and take no SMs, so a transfer really runs beside
// a GEMM. What needs SMs is one short pass at the end that sums the received copies.
//
// Each rank owns a staging region of device memory that every peer maps (CUDA IPC): two areas
// (by the parity of the op's sequence number), each with one slot of `capacity` bytes per peer;
// and a page of flags, ready[j] and consumed[j] as peer j writes them, in host shared memory
// (POSIX shm, mapped by every peer and registered with CUDA), so the host can read and write
// them without a GPU stream. An op with sequence number k (one per piece of at most `capacity`
// bytes), all on the group's communication stream:
//   1. wait until every peer j has consumed op k-2's data (my consumed[j] >= k-2): the staging
//      slot this op writes into on j is free again;
//   2. copy my piece into my slot of every peer's staging area (cudaMemcpyAsync: a copy
//      engine), then set that peer's ready[me] = k;
//   3. wait until every peer's data is here (my ready[j] >= k);
//   4. sum the pieces in rank order into my tensor (kernels/cuda/peer_sum.h): every rank adds
//      the same numbers in the same order, so every rank gets the same bits;
//   5. set every peer's consumed[me] = k.
// The waits and flag writes are stream memory operations (cuStreamWaitValue32 /
// cuStreamWriteValue32): the stream waits in its front end and no SM spins. Sequence numbers
// compare modulo 2^32. Two parities let op k+1's copies start while peers still sum op k.
//
// Failures: a peer that never comes leaves the stream waiting in step 1 or 3; the group's
// watchdog times the op out as for an NCCL op and calls release(), which sets this rank's own
// flags far ahead so every wait queued on the stream passes (the op's result is then wrong,
// and the group reports it as failed). Regions are freed only when every peer has consumed
// everything sent to it (nothing can write into them later); a group that failed leaks its
// region rather than risk a late write into memory the allocator handed out again. Anything
// that can block the host inside the group's lock while such a wait is queued would hang the
// watchdog with it: the sum kernels are loaded when the group is made, since CUDA's lazy
// loading of a kernel at its first launch waits for the device (the tests' timeout, dead-peer
// and unwinding cases hung exactly so until then).
//
// The same bits as NCCL's all-reduce, and faster on 2 H200s for both data and tensor
// parallelism (docs/PERFORMANCE.md).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/peer_all_reduce_mode.h"
#include "trireme/dist/process_group.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

class PeerAllReduce {
 public:
  struct Options {
    std::string key_prefix;  // store keys for the handshake; unique per group instance
    int rank = 0;
    int size = 1;
    int device = 0;
    int64_t capacity = 32 << 20;  // bytes per staging slot; larger tensors go in pieces
    std::chrono::milliseconds timeout{30'000};
    PeerAllReduceMode mode = PeerAllReduceMode::automatic;  // which group sizes may use it
  };

  // Collective: every rank of the group calls it at the same point. Returns null on every rank
  // (why_not says why) unless all ranks can take part: one host, peer access between all their
  // GPUs, stream memory operations, 2 ranks (or up to 8 with mode on, never with mode off).
  // Throws when a rank does not answer within the timeout.
  static std::unique_ptr<PeerAllReduce> create(StoreClient& store, const Options& options, std::string* why_not);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // Whether all_reduce takes this tensor and op (contiguous, floating point, sum or avg).
  static bool accepts(const Tensor& t, ReduceOp op);
  // Queues t = the sum (or average) over the ranks on `stream`, which must already wait for the
  // work that produced t. Every rank calls it with the same shape and dtype, in the same order.
  void all_reduce(const Tensor& t, ReduceOp op, cudaStream_t stream);
  // The same protocol for the two halves of an all-reduce, each rank pushing 1/size of the
  // bytes to each peer (ProcessGroup's flat layouts: output is rank r's chunk of the sum of the
  // inputs; output is every rank's input in rank order). reduce_scatter takes what accepts()
  // does; all_gather any contiguous tensor. ProcessGroupNccl routes them here whenever it
  // routes all-reduces.
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, cudaStream_t stream);
  void all_gather(const Tensor& output, const Tensor& input, cudaStream_t stream);
  // A reduce-scatter whose input is written chunk by chunk (ProcessGroup::reduce_scatter_staged,
  // Note [staged reduce-scatter]): begin takes the op's place in the sequence, send pushes chunk
  // j to rank j once the caller's stream has written it, finish sends what is left and sums
  // (the same bits as reduce_scatter). No other op of this group may come in between. Only
  // for what can_stage() takes: reduce_scatter's operands with a chunk of at most one slot.
  bool can_stage(const Tensor& output, const Tensor& input, ReduceOp op) const;
  void begin_staged_reduce_scatter();
  void send_staged_chunk(const Tensor& input, int j, cudaStream_t stream);
  // The part of chunk j up to element `end` that has not gone yet; send_staged_chunk sends the
  // rest and tells rank j that the chunk is complete.
  void send_staged_part(const Tensor& input, int j, int64_t end, cudaStream_t stream);
  // bias (optional): added to the result's rows, rounded as a separate add would be; residual
  // (optional, output's shape): added after it, likewise.
  // release_stream (optional): where the slots are freed once the sum is done, so that `stream`
  // goes straight on to its next kernel (the group's stream; by default `stream` itself).
  void finish_staged_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, cudaStream_t stream,
                                    const Tensor& bias = Tensor(), const Tensor& residual = Tensor(),
                                    cudaStream_t release_stream = nullptr);
  // For a caller that adds its own chunk itself (StagedReduceScatter::others_sum): sends what is
  // left, makes `stream` wait for the peers' chunks and returns where their sum is: with two
  // ranks the arrived chunk itself (its staging slot), else `scratch` (output's size), summed in
  // rank order. release_staged_reduce_scatter then ends the op, queued after every read of it:
  // it frees the slots on release_stream, which must already follow those reads.
  const void* staged_others_sum(const Tensor& input, const Tensor& scratch, cudaStream_t stream);
  void release_staged_reduce_scatter(cudaStream_t release_stream);
  // An all-gather whose arrivals are read where they land (ProcessGroup::all_gather_staged, Note
  // [staged all-gather]): begin pushes the input to every peer and makes `stream` wait until every
  // peer's has arrived, after which staged_slot(q) holds rank q's input; fill copies input and
  // slots into output (the copy engines, beside the caller's reads); finish frees the slots, so
  // it must be queued after every read of them. No other op of this group may come in between.
  // Only for inputs of at most one slot (can_stage_gather).
  bool can_stage_gather(const Tensor& input) const;
  void begin_staged_all_gather(const Tensor& input, cudaStream_t stream);
  void* staged_slot(int q) const;
  void fill_staged_all_gather(const Tensor& output, const Tensor& input, cudaStream_t stream);
  // The other ranks' slots into `others`, in rank order without this rank's (keep_others).
  void fill_staged_others(const Tensor& others, cudaStream_t stream);
  void finish_staged_all_gather(cudaStream_t stream);
  // After a failure: lets every wait queued on this rank's stream pass (Note [peer all-reduce]).
  void release() noexcept;

  struct Impl;

 private:
  explicit PeerAllReduce(std::unique_ptr<Impl> impl);
  void check_no_staged_op(const char* what) const;
  void check_staged(const char* kind) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trireme::dist
