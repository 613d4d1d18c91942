// ProcessGroupByDevice: one group whose backend follows each tensor's device: Gloo for CPU
// tensors, NCCL for CUDA tensors, in the same program.
//
//   auto world = make_process_group("by_device", store, env.rank, env.world_size);
//   world->all_reduce(cpu_counts)->wait();      // Gloo
//   world->all_reduce(gpu_grads)->wait();       // NCCL (its communicator is made on this first call)
//   DeviceMesh mesh(world, "dp=2,tp=2");         // each dimension's group dispatches the same way
//
// The Gloo group is made at construction. The NCCL group is made on the first call with a CUDA
// tensor (on that tensor's GPU): every member reaches that call in the same order, as with any
// collective, so they make it together; a program that only ever uses CPU tensors never
// touches CUDA or NCCL. A CUDA tensor in a build without NCCL, or with no usable GPU, is an
// error saying so. The two tensors of a two-tensor op must be on the same device. barrier()
// blocks the host through Gloo. Sub-groups (new_group) dispatch the same way, with their own
// lazily made NCCL communicator.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "trireme/dist/process_group.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

class ProcessGroupByDevice : public ProcessGroup {
 public:
  // Every rank of the group calls this; it returns once the Gloo group is connected.
  ProcessGroupByDevice(std::shared_ptr<StoreClient> store, int rank, int size, const ProcessGroupOptions& options = {});

  std::string backend_name() const override { return "by_device"; }
  // The Gloo side, and the NCCL side (null until the first CUDA tensor).
  const std::shared_ptr<ProcessGroup>& gloo() const { return gloo_; }
  std::shared_ptr<ProcessGroup> nccl_if_made() const;

  WorkPtr all_reduce(const Tensor& tensor, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& options = {}) override;
  WorkPtr all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options = {}) override;
  std::unique_ptr<StagedAllGather> all_gather_staged(const Tensor& output, const Tensor& input,
                                                     const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, const ReduceScatterOptions& options = {}) override;
  std::unique_ptr<StagedReduceScatter> reduce_scatter_staged(const Tensor& output, const Tensor& input,
                                                             const ReduceScatterOptions& options = {}) override;
  WorkPtr all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options = {}) override;
  WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& options = {}) override;
  WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name) override;

 private:
  ProcessGroupByDevice(std::shared_ptr<StoreClient> store, std::shared_ptr<ProcessGroup> gloo,
                       std::string nccl_prefix, const ProcessGroupOptions& options);
  // The group for a tensor on `device` (making the NCCL one on the first CUDA tensor).
  ProcessGroup& backend_for(const char* op, const Tensor& tensor, const Tensor* other = nullptr);

  std::shared_ptr<StoreClient> store_;
  ProcessGroupOptions options_;
  std::shared_ptr<ProcessGroup> gloo_;
  std::string nccl_prefix_;  // the store prefix of the NCCL side
  mutable std::mutex mutex_;
  std::shared_ptr<ProcessGroup> nccl_;
  std::map<std::string, int> groups_named_;  // child groups made per name (unique prefixes)
};

}  // namespace trireme::dist
