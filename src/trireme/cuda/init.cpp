// Installs the CUDA backend when libtrireme loads, if a GPU is usable: the caching allocator
// for DeviceType::cuda and the cross-device copy. Without a usable GPU nothing is installed,
// and making a CUDA tensor fails with "no allocator for device type cuda" (the CPU still works).
// Kernels register themselves regardless (registry entries cost nothing).
#include "trireme/core/allocator.h"
#include "trireme/cuda/allocator.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/device_copy.h"
#include "trireme/ops/copy.h"

namespace trireme::cuda {
namespace {

const bool installed = [] {
  if (!is_available()) return false;
  set_allocator(DeviceType::cuda, &caching_allocator());
  set_device_copy(&device_copy);
  return true;
}();

}  // namespace
}  // namespace trireme::cuda
