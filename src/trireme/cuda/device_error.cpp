// The per-device slots of device_error.h and the messages they turn into.
#include "trireme/cuda/device_error.h"

#include <array>
#include <atomic>
#include <mutex>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"

namespace trireme::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Slots {
  std::mutex mutex;
  std::array<DeviceErrorSlot*, kMaxDevices> host{};    // the host's view
  // The same memory as the device sees it; read without the lock on every kernel launch that
  // checks indices, written once per device under it.
  std::array<std::atomic<DeviceErrorSlot*>, kMaxDevices> device{};
};

Slots& slots() {
  static Slots* s = new Slots();  // never destroyed: kernels may still hold the pointers at exit
  return *s;
}

[[noreturn]] void throw_error(int device, const DeviceErrorSlot& e) {
  switch (IndexErrorSite(e.site)) {
    case IndexErrorSite::embedding_id:
      TRIREME_FAIL("embedding: id ", e.value, " (at position ", e.position,
                   ") is out of range for a vocabulary of size V = ", e.limit, " (found on cuda:", device, ")");
    case IndexErrorSite::cross_entropy_target:
      TRIREME_FAIL("cross_entropy: target ", e.value, " at row ", e.position, " is out of range for ", e.limit,
                   " classes (expected 0 <= target < ", e.limit, ", or ignore_index = ", e.extra,
                   "; found on cuda:", device, ")");
    case IndexErrorSite::vocab_parallel_target:
      TRIREME_FAIL("vocab_parallel_cross_entropy: target ", e.value, " at row ", e.position,
                   " is outside the vocabulary of ", e.limit, " (or ignore_index = ", e.extra, "; found on cuda:",
                   device, ")");
    default:
      TRIREME_FAIL("a CUDA kernel on cuda:", device, " reported error site ", e.site, " (value ", e.value,
                   ", position ", e.position, ")");
  }
}

}  // namespace

DeviceErrorSlot* device_error_slot(int device) {
  if (device < 0) device = current_device();
  TRIREME_CHECK(device < kMaxDevices, "device_error_slot: device ", device, " is beyond ", kMaxDevices);
  Slots& s = slots();
  if (DeviceErrorSlot* ready = s.device[size_t(device)].load(std::memory_order_acquire)) return ready;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.device[size_t(device)].load(std::memory_order_relaxed)) {
    DeviceGuard g(device);
    void* host = nullptr;
    TRIREME_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceErrorSlot), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<DeviceErrorSlot*>(host) = DeviceErrorSlot{};
    void* dev = nullptr;
    TRIREME_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
    s.host[size_t(device)] = static_cast<DeviceErrorSlot*>(host);
    s.device[size_t(device)].store(static_cast<DeviceErrorSlot*>(dev), std::memory_order_release);
  }
  return s.device[size_t(device)].load(std::memory_order_relaxed);
}

void raise_pending_device_error(int device) {
  Slots& s = slots();
  const int first = device < 0 ? 0 : device, last = device < 0 ? kMaxDevices - 1 : device;
  for (int d = first; d <= last && d < kMaxDevices; ++d) {
    if (!s.device[size_t(d)].load(std::memory_order_acquire)) continue;  // host[d] is set before it
    volatile DeviceErrorSlot* slot = s.host[size_t(d)];
    if (slot->site == 0) continue;
    DeviceErrorSlot e;
    e.site = slot->site;
    e.value = slot->value;
    e.position = slot->position;
    e.limit = slot->limit;
    e.extra = slot->extra;
    slot->site = 0;  // reported once; the next bad index is reported again
    throw_error(d, e);
  }
}

}  // namespace trireme::cuda
