// ProcessGroupByDevice: dispatch of each call to the Gloo or the (lazily made) NCCL group by
// the tensor's device.
#include "trireme/dist/process_group_by_device.h"

#include <atomic>
#include <cstdlib>

#include "trireme/cuda/device.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/dist/process_group_nccl.h"

namespace trireme::dist {

namespace {

std::string restart_count() {
  const char* restart = std::getenv("TRIREME_RESTART_COUNT");
  return restart ? restart : "0";
}

// Several by-device worlds in one process (made in the same order on every rank) get their own keys.
int next_world_instance() {
  static std::atomic<int> instances{0};
  return instances++;
}

}  // namespace

ProcessGroupByDevice::ProcessGroupByDevice(std::shared_ptr<StoreClient> store, int rank, int size,
                                           const ProcessGroupOptions& options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(options) {
  TRIREME_CHECK(store_, "ProcessGroupByDevice: a store is required");
  std::string world = str_cat("by_device#", next_world_instance(), "/");
  gloo_ = std::make_shared<ProcessGroupGloo>(
      store_, rank, size, GlooOptions{.timeout = options.timeout, .prefix = str_cat("gloo/", restart_count(), "/", world)});
  nccl_prefix_ = str_cat("nccl/", restart_count(), "/", world);
}

ProcessGroupByDevice::ProcessGroupByDevice(std::shared_ptr<StoreClient> store, std::shared_ptr<ProcessGroup> gloo,
                                           std::string nccl_prefix, const ProcessGroupOptions& options)
    : ProcessGroup(gloo->rank(), gloo->size(), gloo->global_ranks()), store_(std::move(store)), options_(options),
      gloo_(std::move(gloo)), nccl_prefix_(std::move(nccl_prefix)) {}

std::shared_ptr<ProcessGroup> ProcessGroupByDevice::nccl_if_made() const {
  std::lock_guard lock(mutex_);
  return nccl_;
}

ProcessGroup& ProcessGroupByDevice::backend_for(const char* op, const Tensor& tensor, const Tensor* other) {
  TRIREME_CHECK(tensor.defined(), "by_device ", op, ": the tensor is undefined");
  if (other) {
    TRIREME_CHECK(other->defined(), "by_device ", op, ": the input tensor is undefined");
    TRIREME_CHECK(other->device() == tensor.device(), "by_device ", op, ": the output is on ", tensor.device(),
                  " but the input is on ", other->device(), "; both must be on the same device");
  }
  if (tensor.device().is_cpu()) return *gloo_;
  std::lock_guard lock(mutex_);
  if (!nccl_) {
    TRIREME_CHECK(nccl_is_built(), "by_device ", op, ": the tensor is on ", tensor.device(),
                  ", but trireme was built without NCCL, so CUDA tensors cannot be communicated");
    TRIREME_CHECK(cuda::is_available(), "by_device ", op, ": the tensor is on ", tensor.device(),
                  " but no GPU is usable: ", cuda::unavailable_reason());
    int device = options_.device >= 0 ? options_.device : tensor.device().index;
    nccl_ = std::make_shared<ProcessGroupNccl>(store_, rank_, global_ranks_,
                                               NcclOptions{.timeout = options_.timeout,
                                                           .device = device,
                                                           .prefix = nccl_prefix_,
                                                           .peer_all_reduce = options_.peer_all_reduce});
  }
  return *nccl_;
}

WorkPtr ProcessGroupByDevice::all_reduce(const Tensor& tensor, const AllReduceOptions& options) {
  return backend_for("all_reduce", tensor).all_reduce(tensor, options);
}
WorkPtr ProcessGroupByDevice::broadcast(const Tensor& tensor, const BroadcastOptions& options) {
  return backend_for("broadcast", tensor).broadcast(tensor, options);
}
WorkPtr ProcessGroupByDevice::all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options) {
  return backend_for("all_gather", output, &input).all_gather(output, input, options);
}
std::unique_ptr<StagedAllGather> ProcessGroupByDevice::all_gather_staged(const Tensor& output, const Tensor& input,
                                                                       const AllGatherOptions& options) {
  return backend_for("all_gather", input, output.defined() ? &output : nullptr).all_gather_staged(output, input, options);
}
WorkPtr ProcessGroupByDevice::reduce_scatter(const Tensor& output, const Tensor& input,
                                             const ReduceScatterOptions& options) {
  return backend_for("reduce_scatter", output, &input).reduce_scatter(output, input, options);
}
std::unique_ptr<StagedReduceScatter> ProcessGroupByDevice::reduce_scatter_staged(const Tensor& output,
                                                                               const Tensor& input,
                                                                               const ReduceScatterOptions& options) {
  return backend_for("reduce_scatter", output, &input).reduce_scatter_staged(output, input, options);
}
WorkPtr ProcessGroupByDevice::all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options) {
  return backend_for("all_to_all", output, &input).all_to_all(output, input, options);
}
WorkPtr ProcessGroupByDevice::send(const Tensor& tensor, int dst, const SendRecvOptions& options) {
  return backend_for("send", tensor).send(tensor, dst, options);
}
WorkPtr ProcessGroupByDevice::recv(const Tensor& tensor, int src, const SendRecvOptions& options) {
  return backend_for("recv", tensor).recv(tensor, src, options);
}
WorkPtr ProcessGroupByDevice::barrier(const BarrierOptions& options) { return gloo_->barrier(options); }

std::shared_ptr<ProcessGroup> ProcessGroupByDevice::new_group(const std::vector<int>& ranks, const std::string& name) {
  // The Gloo child checks the ranks (members only, none twice) and connects now.
  std::shared_ptr<ProcessGroup> gloo_child = gloo_->new_group(ranks, name);
  std::string ranks_key;
  for (int g : gloo_child->global_ranks()) ranks_key += (ranks_key.empty() ? "" : ",") + std::to_string(g);
  int instance;
  {
    std::lock_guard lock(mutex_);
    instance = groups_named_[name]++;
  }
  std::string prefix = str_cat(nccl_prefix_, name, "#", instance, "[", ranks_key, "]/");
  return std::shared_ptr<ProcessGroup>(new ProcessGroupByDevice(store_, std::move(gloo_child), prefix, options_));
}

}  // namespace trireme::dist
