// ProcessGroupNccl: collectives on CUDA tensors through NCCL, on a communication stream of the
// group, with the ncclUniqueId handed out through trireme's store.
//
//   DistEnv env = dist_env_from_environment();
//   cuda::set_device(env.local_rank);                          // one GPU per process
//   auto store = std::make_shared<StoreClient>(store_client_options(env));
//   auto world = std::make_shared<ProcessGroupNccl>(store, env.rank, env.world_size,
//                                                   NcclOptions{.timeout = std::chrono::seconds(60)});
//   loss.backward();                                           // kernels on the compute stream
//   auto work = world->all_reduce(grads, {.op = ReduceOp::avg}); // waits for them on the GPU only
//   ...                                                        // more compute overlaps the all-reduce
//   work->wait();                                              // later compute waits for it (GPU side)
//   optimizer.step();
//
// Note [nccl streams]
// Each group owns one communication stream. Every op first makes that stream wait (an event, on
// the GPU) for the work already queued on the caller's current stream, so it reads the tensors
// as the compute before it left them, and the host never blocks; then it runs the NCCL call on
// the communication stream and records an event after it. Compute issued meanwhile overlaps
// the communication. Work::wait() makes the caller's current stream wait for that event:
//   - wait() (no timeout) returns at once; the host is not blocked. Compute queued afterwards on
//     the current stream sees the op's result. Its errors surface through the group's watchdog
//     (below) and the next call on the group.
//   - wait(timeout) also blocks the host until the op is done, polling its event and NCCL's
//     asynchronous error state; when the timeout passes, a peer fails or a member rank dies, it
//     aborts the communicator (ncclCommAbort) and throws an error naming the op and the rank.
// Tensors handed to an op are kept alive until the op is done on the GPU, even when the Work is
// dropped (Note [allocator streams]). Every rank must issue the group's collectives in the same
// order (as with any collective library).
//
// Note [nccl watchdog]
// A thread of the group watches the ops in flight. When one runs past its timeout (the option's,
// else the group's), NCCL reports an asynchronous error, or a member rank dies (Note [store
// liveness]), it aborts the communicator: the stuck NCCL kernels end, so streams waiting on
// them move on instead of hanging; it prints the error to stderr; and every later call on the
// group, and the wait of every op in flight, throws it. A job never hangs silently on a lost
// peer: at worst it runs on past the op (with wrong data) up to its next call on the group.
//
// Note [nccl send/recv]
// NCCL pairs sends with recvs in the order they are issued between two ranks, and a send may
// block its stream until the peer's recv runs. So that a ring exchange (each rank sends, then
// receives) cannot deadlock, send() and recv() only queue the transfer (after an event on the
// current stream); the queued transfers start together, in one NCCL group, at the next
// collective, or at the first wait() or is_completed() of any of them. The tag must be >= 0 but
// does not take part in matching.
// A group is safe only when the peer groups the same transfers the same way. NCCL runs a group's
// transfers with one peer as units of one send and one recv, the first queued send with the
// first queued recv, and a unit starts only when the one before it (same peer) has finished: in
// a group {send a, send b, recv c} to and from rank 1, send b waits for recv c. When rank 1
// posts send c only after it has received b, both ranks hang, with no error until the timeout
// (what hung pipelines on GPUs: Note [pipeline transfers start alone] in
// parallel/pipeline_executor.h; the worker's p2p scenarios in tests/cuda/worker show it). A
// transfer with SendRecvOptions::alone starts at once in a group of its own (transfers queued
// before it start first, together); a program whose ranks post such transfers in one global
// order (every rank's transfers a subsequence of it) cannot deadlock on them.
#pragma once

#include <memory>
#include <string>

#include "trireme/cuda/stream.h"
#include "trireme/dist/peer_all_reduce_mode.h"
#include "trireme/dist/process_group.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

struct NcclOptions {
  milliseconds timeout{30'000};  // default for every op, and for creating the communicator
  int device = -1;               // the GPU of this rank; -1: the current device at construction
  // Store keys of this group live under this prefix; the default includes the restart count
  // (TRIREME_RESTART_COUNT) so a restarted job does not read a previous attempt's id.
  std::string prefix;
  milliseconds watchdog_interval{50};  // how often the watchdog looks (Note [nccl watchdog])
  // The copy-engine collectives' staging slot per peer (Note [peer all-reduce]; one activation
  // of GPT 1.3B at B=8, T=1024 in bf16); larger tensors go in pieces. Tests make it small.
  int64_t peer_slot_bytes = int64_t(32) << 20;
  // Which group sizes use the copy-engine collectives (dist/peer_all_reduce_mode.h); groups
  // made with new_group inherit it.
  PeerAllReduceMode peer_all_reduce = PeerAllReduceMode::automatic;
};

// Whether this build has NCCL (TRIREME_WITH_NCCL); false means constructing a group throws.
bool nccl_is_built();

class ProcessGroupNccl : public ProcessGroup {
 public:
  // Every rank of the group calls this; it returns once all have joined the communicator (or
  // throws after options.timeout naming this rank and, when known, the rank that died).
  // Sets NCCL_NVLS_ENABLE=0 in the environment unless it is set (see launcher.cpp).
  ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, int size, NcclOptions options = {});
  // A group of some of the job's ranks made without a parent communicator (what a group that
  // creates its NCCL side lazily needs): global_ranks[i] is the job-wide rank of member i, and
  // options.prefix must be the same on the members and unique among the job's groups.
  ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, std::vector<int> global_ranks, NcclOptions options);
  // Waits up to the group's timeout for the ops in flight, then releases the communicator
  // (aborting it when they do not finish or the group has failed).
  ~ProcessGroupNccl() override;

  std::string backend_name() const override { return "nccl"; }
  int device() const;
  cuda::Stream stream() const;  // the communication stream (Note [nccl streams])
  // Whether floating-point sums and averages go through the copy engines (Note [peer
  // all-reduce], dist/peer_all_reduce.h) and, when they do not, why.
  bool uses_peer_all_reduce() const;
  std::string peer_all_reduce_why_not() const;
  // Whether reduce-scatters and all-gathers take the copy engines too (whenever the peer
  // all-reduce is on).
  bool uses_peer_rs_ag() const;

  WorkPtr all_reduce(const Tensor& tensor, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& options = {}) override;
  WorkPtr all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options = {}) override;
  // Through the copy engines, arrivals are read in the staging memory (Note [staged all-gather]).
  std::unique_ptr<StagedAllGather> all_gather_staged(const Tensor& output, const Tensor& input,
                                                     const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, const ReduceScatterOptions& options = {}) override;
  // Through the copy engines, chunk j leaves when it is written (Note [staged reduce-scatter]).
  std::unique_ptr<StagedReduceScatter> reduce_scatter_staged(const Tensor& output, const Tensor& input,
                                                             const ReduceScatterOptions& options = {}) override;
  // One NCCL group of a send and a recv per peer (this rank included).
  WorkPtr all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options = {}) override;
  WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& options = {}) override;
  WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& options = {}) override;
  // An all-reduce of one element: wait() orders the caller's stream after every rank's earlier
  // ops of this group; wait(timeout) also blocks the host until all ranks got there.
  WorkPtr barrier(const BarrierOptions& options = {}) override;
  // A new communicator for the listed ranks (only they call this), on the same GPU.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name) override;

  // Aborts the communicator now: ops in flight end, and they and every later call throw
  // `reason`. What the watchdog does on a failure; also for a program that gives up.
  void abort(const std::string& reason);

  struct Impl;

 private:

  std::shared_ptr<Impl> impl_;  // shared with the Works, which may outlive the group
};

}  // namespace trireme::dist
