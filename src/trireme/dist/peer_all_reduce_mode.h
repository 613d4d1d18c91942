// Whether an NCCL group moves its floating-point sums and averages (and its reduce-scatters and
// all-gathers) through the GPUs' copy engines instead of NCCL's kernels (Note [peer all-reduce],
// dist/peer_all_reduce.h). Either way a group whose ranks cannot share memory uses NCCL.
//
//   NcclOptions{.peer_all_reduce = parse_peer_all_reduce_mode("off")}   // NCCL for everything
#pragma once

#include <string>

#include "trireme/core/error.h"

namespace trireme::dist {

enum class PeerAllReduceMode {
  automatic,  // groups of 2 ranks of one host: one push each way moves what NCCL's ring does
  off,        // NCCL for everything
  // groups of 2 to 8 ranks of one host; beyond 2 every rank pushes its whole tensor to every
  // peer, more bytes than NCCL's ring
  on,
};

// "auto", "off" or "on" (the trainer's parallel.peer_allreduce); anything else throws naming them.
inline PeerAllReduceMode parse_peer_all_reduce_mode(const std::string& name) {
  if (name == "auto") return PeerAllReduceMode::automatic;
  if (name == "off") return PeerAllReduceMode::off;
  TRIREME_CHECK(name == "on", "peer all-reduce: unknown mode '", name, "' (choose auto, off or on)");
  return PeerAllReduceMode::on;
}

inline const char* peer_all_reduce_mode_name(PeerAllReduceMode mode) {
  return mode == PeerAllReduceMode::automatic ? "auto" : mode == PeerAllReduceMode::off ? "off" : "on";
}

}  // namespace trireme::dist
