// make_process_group: the backend named, or the one "auto" picks for this build and machine.
#include "trireme/dist/process_group_factory.h"

#include "trireme/cuda/device.h"
#include "trireme/dist/process_group_by_device.h"
#include "trireme/dist/process_group_gloo.h"
#include "trireme/dist/process_group_nccl.h"

namespace trireme::dist {

std::string resolve_backend(const std::string& backend) {
  if (backend == "auto") return nccl_is_built() && cuda::is_available() ? "nccl" : "gloo";
  TRIREME_CHECK(backend == "gloo" || backend == "nccl" || backend == "by_device", "make_process_group: unknown backend '",
                backend, "' (choose gloo, nccl, by_device or auto)");
  return backend;
}

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<StoreClient> store,
                                                 int rank, int size, const ProcessGroupOptions& options) {
  std::string chosen = resolve_backend(backend);
  if (chosen == "nccl") {
    TRIREME_CHECK(nccl_is_built(), "make_process_group: backend nccl was asked for, but trireme was built without "
                  "NCCL (TRIREME_WITH_NCCL is off)");
    TRIREME_CHECK(cuda::is_available(), "make_process_group: backend nccl needs a usable GPU: ",
                  cuda::unavailable_reason());
    return std::make_shared<ProcessGroupNccl>(std::move(store), rank, size,
                                              NcclOptions{.timeout = options.timeout, .device = options.device,
                                                          .peer_all_reduce = options.peer_all_reduce});
  }
  if (chosen == "by_device") return std::make_shared<ProcessGroupByDevice>(std::move(store), rank, size, options);
  return std::make_shared<ProcessGroupGloo>(std::move(store), rank, size, GlooOptions{.timeout = options.timeout});
}

}  // namespace trireme::dist
