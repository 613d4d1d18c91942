// ProcessGroupGloo: collectives on CPU tensors over Gloo's TCP transport, with the rendezvous
// going through trireme's store.
//
//   DistEnv env = dist_env_from_environment();
//   auto store = std::make_shared<StoreClient>(store_client_options(env));
//   auto world = std::make_shared<ProcessGroupGloo>(store, env.rank, env.world_size,
//                                                   GlooOptions{.timeout = std::chrono::seconds(60)});
//   world->all_reduce(grads, {.op = ReduceOp::avg})->wait();
//
// Collectives run in the order they are issued, one at a time, on a worker thread of the group
// (every rank must issue them in the same order, as with any collective library); send/recv
// are posted at once on the calling thread and complete in their Work's wait().
#pragma once

#include <memory>
#include <string>

#include "trireme/dist/process_group.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

struct GlooOptions {
  milliseconds timeout{30'000};  // default for every op, and for connecting to the peers
  // The address Gloo listens on for its peers. Empty: $TRIREME_GLOO_HOST, else 127.0.0.1 when
  // the store is on loopback, else this machine's hostname.
  std::string hostname;
  // Store keys of this group live under this prefix; the default includes the restart count
  // (TRIREME_RESTART_COUNT) so a restarted job does not read a previous attempt's addresses.
  std::string prefix;
};

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Every rank of the group calls this; it returns once all have connected (or throws after
  // options.timeout naming the ranks that did not arrive).
  ProcessGroupGloo(std::shared_ptr<StoreClient> store, int rank, int size, GlooOptions options = {});
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }

  WorkPtr all_reduce(const Tensor& tensor, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& options = {}) override;
  WorkPtr all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, const ReduceScatterOptions& options = {}) override;
  WorkPtr all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options = {}) override;
  WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& options = {}) override;
  WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name) override;

  struct Impl;

 private:
  ProcessGroupGloo(std::shared_ptr<StoreClient> store, int rank, std::vector<int> global_ranks, GlooOptions options);

  std::unique_ptr<Impl> impl_;
};

}  // namespace trireme::dist
