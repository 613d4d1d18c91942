// CUDA devices: how many are usable, which one is current, and waiting for them.
// Safe to call in any build and on any machine: without CUDA or without a usable GPU,
// device_count() is 0 and is_available() is false (never a crash), so programs can pick
//
//   Device dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
#pragma once

#include <string>

#include "trireme/core/container_image.h"
#include "trireme/core/error.h"

namespace trireme::cuda {

#ifdef TRIREME_WITH_CUDA
int device_count();          // 0 when the driver or runtime can't be used, or there is no GPU
bool is_available();         // device_count() > 0
std::string unavailable_reason();  // why is_available() is false ("" when it is true)
int current_device();
void set_device(int device);  // throws on an index outside [0, device_count())
void synchronize(int device = -1);  // waits for all work on a device (-1: the current one)
#else
inline int device_count() { return 0; }
inline bool is_available() { return false; }
inline std::string unavailable_reason() { return without_cuda_reason(); }
// Without CUDA there is no device to select or wait for. Callers check is_available() or the
// tensor's device first; these definitions keep such guarded calls linkable in a CPU build and
// turn an unguarded one into an error that says why.
inline int current_device() { TRIREME_FAIL("cuda::current_device: ", unavailable_reason()); }
inline void set_device(int device) { TRIREME_FAIL("cuda::set_device(", device, "): ", unavailable_reason()); }
inline void synchronize(int device = -1) { TRIREME_FAIL("cuda::synchronize(", device, "): ", unavailable_reason()); }
#endif

// Switches the current device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

}  // namespace trireme::cuda
