// Errors that kernels find (an index out of range) reported without stopping the host.
//
// Validating ids on the host meant copying them back and waiting for the GPU inside every
// embedding and cross-entropy call, so the host could never run ahead of the device. Instead a
// kernel that meets a bad index records the first one in a small slot of mapped, pinned host
// memory (per device), skips the bad element (it never reads out of bounds), and goes on; the
// next time the host waits for that device (a stream or device synchronize, a copy to the host,
// item()) the slot is checked and the error is thrown there, naming the op, the value, its
// position and the valid range, exactly as the CPU kernels word it at the call:
//
//   Tensor loss = gpt.loss(ids, targets);   // a target of 50310 with a vocabulary of 50304
//   loss.item();                            // throws "cross_entropy: target 50310 (at position
//                                           //   77) is out of range for 50304 classes ..."
#pragma once

#include <cstdint>

namespace trireme::cuda {

// Which check failed: selects the message (see device_error.cpp).
enum class IndexErrorSite : int32_t {
  none = 0,
  embedding_id = 1,
  cross_entropy_target = 2,
  vocab_parallel_target = 3,
};

// One per device, in host memory the device writes to directly. `site` is set first by an
// atomic compare-and-swap, so the first error wins and later ones leave it alone.
struct DeviceErrorSlot {
  int32_t site;
  int32_t pad;
  int64_t value, position, limit, extra;
};

// The slot as a device pointer, for kernels (allocated on first use).
DeviceErrorSlot* device_error_slot(int device);

// Throws the recorded error of `device` (-1: every device that has a slot), clearing it, if
// there is one. Call only after the host has waited for the device's work.
void raise_pending_device_error(int device = -1);

}  // namespace trireme::cuda

#ifdef __CUDACC__
namespace trireme::cuda {
// In a kernel: records the first bad index of this device.
__device__ inline void report_index_error(DeviceErrorSlot* slot, IndexErrorSite site, int64_t value, int64_t position,
                                          int64_t limit, int64_t extra = 0) {
  if (atomicCAS(&slot->site, 0, int32_t(site)) == 0) {
    slot->value = value;
    slot->position = position;
    slot->limit = limit;
    slot->extra = extra;
    __threadfence_system();
  }
}
}  // namespace trireme::cuda
#endif
