// Installs the CUDA backend when libtrireme loads: the caching allocator for DeviceType::cuda
// and the cross-device copy. No CUDA call is made here: the runtime starts on first use, so
// programs that never touch a GPU pay nothing, and compute-sanitizer (which must see CUDA start)
// can attach. Without a usable GPU, making a CUDA tensor fails with an error that says why.
// Kernels register themselves regardless (registry entries cost nothing).
#include "trireme/core/allocator.h"
#include "trireme/core/device_copy.h"
#include "trireme/cuda/allocator.h"
#include "trireme/cuda/device_copy.h"

namespace trireme::cuda {
namespace {

const bool installed = [] {
  set_allocator(DeviceType::cuda, &caching_allocator());
  set_device_copy(&device_copy);
  return true;
}();

}  // namespace
}  // namespace trireme::cuda
