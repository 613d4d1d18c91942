// CUDA devices: how many are usable, which one is current, and waiting for them.
// Safe to call in any build and on any machine: without CUDA or without a usable GPU,
// device_count() is 0 and is_available() is false (never a crash), so programs can pick
//
//   Device dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
#pragma once

#include <string>

#include "trireme/core/container_image.h"

namespace trireme::cuda {

#ifdef TRIREME_WITH_CUDA
int device_count();          // 0 when the driver or runtime can't be used, or there is no GPU
bool is_available();         // device_count() > 0
std::string unavailable_reason();  // why is_available() is false ("" when it is true)
#else
inline int device_count() { return 0; }
inline bool is_available() { return false; }
inline std::string unavailable_reason() { return without_cuda_reason(); }
#endif

// The rest needs a CUDA build.
int current_device();
void set_device(int device);  // throws on an index outside [0, device_count())
void synchronize(int device = -1);  // waits for all work on a device (-1: the current one)

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
