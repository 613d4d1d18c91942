// make_process_group: one call that picks the backend, "gloo" for CPU tensors or "nccl" for
// CUDA tensors, with "auto" choosing NCCL whenever it is built and a GPU is usable, or
// "by_device": both in one group, each call going where its tensor lives (ProcessGroupByDevice).
//
//   DistEnv env = dist_env_from_environment();
//   if (cuda::is_available()) cuda::set_device(env.local_rank);
//   auto store = std::make_shared<StoreClient>(store_client_options(env));
//   auto world = make_process_group("auto", store, env.rank, env.world_size);
//   Device device = world->backend_name() == "nccl" ? Device::cuda(cuda::current_device()) : Device::cpu();
#pragma once

#include <memory>
#include <string>

#include "trireme/dist/peer_all_reduce_mode.h"
#include "trireme/dist/process_group.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

struct ProcessGroupOptions {
  milliseconds timeout{30'000};  // every op's default, and connecting to the peers
  int device = -1;               // nccl: the GPU of this rank; -1: the current device
  // nccl: which group sizes use the copy-engine collectives (dist/peer_all_reduce_mode.h)
  PeerAllReduceMode peer_all_reduce = PeerAllReduceMode::automatic;
};

// "auto" -> "nccl" when this build has NCCL and a GPU is usable, else "gloo"; "gloo", "nccl" and
// "by_device" are returned as they are; anything else throws naming the choices.
std::string resolve_backend(const std::string& backend);

// Every rank of the group calls this with the same backend (see ProcessGroupGloo and
// ProcessGroupNccl for what each needs). "nccl" without NCCL in the build, or without a GPU,
// throws saying so.
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<StoreClient> store,
                                                 int rank, int size, const ProcessGroupOptions& options = {});

}  // namespace trireme::dist
