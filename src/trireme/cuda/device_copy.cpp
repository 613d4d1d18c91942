// Copies between the host and CUDA devices, and between devices: the hook that to_device() and
// copy_() use (ops/copy.h). Each copy is ordered after the work already queued on the current
// streams of the devices it touches, and work queued later on those streams runs after it. A copy
// involving the host is complete on return (host memory may be read or freed right after) unless
// it is non_blocking and the host side is pinned (Note [pinned copies] in pinned.h). Copies
// between devices go directly over NVLink/PCIe (peer access is enabled on first use).
#include "trireme/cuda/device_copy.h"

#include <mutex>
#include <set>
#include <utility>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/pinned.h"
#include "trireme/cuda/stream.h"

namespace trireme::cuda {
namespace {

// Lets `device` read and write `peer`'s memory directly, once per ordered pair. Without it,
// cudaMemcpyPeerAsync stages through host memory. Pairs that cannot (no P2P path) are left as
// they are: the copy still works, staged.
void enable_peer_access(int device, int peer) {
  static std::mutex mu;
  static std::set<std::pair<int, int>> tried;
  std::lock_guard lock(mu);
  if (!tried.insert({device, peer}).second) return;
  int can = 0;
  TRIREME_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can) return;
  DeviceGuard g(device);
  cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {  // someone else (NCCL) did it first
    cudaGetLastError();
    return;
  }
  TRIREME_CUDA_CHECK(err);
}

}  // namespace

void device_copy(const Tensor& src, Tensor& dst, bool non_blocking) {
  TRIREME_CHECK(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() &&
                    src.numel() == dst.numel(),
                "device copy: needs contiguous tensors of one dtype and size, got ", src.str(), " and ", dst.str());
  const size_t bytes = size_t(src.numel()) * src.element_size();
  if (bytes == 0) return;
  const Device from = src.device(), to = dst.device();
  if (from.is_cpu() && to.is_cuda()) {
    // Synchronized unless asked not to and the source is pinned: a pageable source may be staged
    // lazily, and the caller may free it at once.
    Stream s = current_stream(to.index);
    DeviceGuard g(to.index);
    TRIREME_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, s.handle()));
    if (non_blocking && pinned_record_use(src.data_ptr(), bytes, s)) return;
    s.synchronize();
  } else if (from.is_cuda() && to.is_cpu()) {
    Stream s = current_stream(from.index);
    DeviceGuard g(from.index);
    TRIREME_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost, s.handle()));
    if (non_blocking && pinned_record_use(dst.data_ptr(), bytes, s)) return;  // the host waits on s
    s.synchronize();
  } else if (from.is_cuda() && to.is_cuda()) {
    // The copy runs on the destination's stream after the source's pending writes; the source's
    // stream then waits for the copy, so its allocator cannot hand src's memory out too early.
    if (from.index != to.index) {
      enable_peer_access(to.index, from.index);
      enable_peer_access(from.index, to.index);
    }
    Stream src_stream = current_stream(from.index), dst_stream = current_stream(to.index);
    Event src_ready, copied;
    src_ready.record(src_stream);
    src_ready.wait(dst_stream);
    DeviceGuard g(to.index);
    TRIREME_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), to.index, src.data_ptr(), from.index, bytes,
                                           dst_stream.handle()));
    copied.record(dst_stream);
    copied.wait(src_stream);
  } else {
    TRIREME_FAIL("device copy: from ", from, " to ", to, " is not a CUDA copy");
  }
}

}  // namespace trireme::cuda
