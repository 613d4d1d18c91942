// Copies between the host and CUDA devices, and between devices: the hook that to_device() and
// copy_() use (ops/copy.h). Each copy is ordered after the work already queued on the current
// streams of the devices it touches, and is complete from the user's point of view on return
// whenever the host is involved: host memory may be read or freed right after.
#include "trireme/cuda/device_copy.h"

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/stream.h"

namespace trireme::cuda {

void device_copy(const Tensor& src, Tensor& dst) {
  TRIREME_CHECK(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() &&
                    src.numel() == dst.numel(),
                "device copy: needs contiguous tensors of one dtype and size, got ", src.str(), " and ", dst.str());
  const size_t bytes = size_t(src.numel()) * src.element_size();
  if (bytes == 0) return;
  const Device from = src.device(), to = dst.device();
  if (from.is_cpu() && to.is_cuda()) {
    // Synchronized: a pageable source may be staged lazily, and the caller may free it at once.
    Stream s = current_stream(to.index);
    DeviceGuard g(to.index);
    TRIREME_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, s.handle()));
    s.synchronize();
  } else if (from.is_cuda() && to.is_cpu()) {
    Stream s = current_stream(from.index);
    DeviceGuard g(from.index);
    TRIREME_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost, s.handle()));
    s.synchronize();
  } else if (from.is_cuda() && to.is_cuda()) {
    // The copy runs on the destination's stream after the source's pending writes; the source's
    // stream then waits for the copy, so its allocator cannot hand src's memory out too early.
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
