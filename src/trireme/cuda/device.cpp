// CUDA device queries. The count is probed once; any runtime error (no driver, a driver older
// than the runtime, no device) means "no usable GPU", reported as 0 devices.
#include "trireme/cuda/device.h"

#include "trireme/cuda/check.h"
#include "trireme/cuda/device_error.h"

namespace trireme::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      r.reason = str_cat("cudaGetDeviceCount failed: ", cudaGetErrorString(err), " (error ", int(err), ")");
    } else if (n == 0) {
      r.reason = "no CUDA device found";
    } else {
      r.count = n;
    }
    return r;
  }();
  return p;
}

}  // namespace

int device_count() { return probe().count; }
bool is_available() { return device_count() > 0; }
std::string unavailable_reason() { return probe().reason; }

int current_device() {
  int d = 0;
  TRIREME_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  TRIREME_CHECK(device >= 0 && device < device_count(), "cuda::set_device: device ", device, " does not exist (",
                device_count(), " usable CUDA devices", is_available() ? "" : ": " + unavailable_reason(), ")");
  TRIREME_CUDA_CHECK(cudaSetDevice(device));
}

void synchronize(int device) {
  DeviceGuard g(device < 0 ? current_device() : device);
  TRIREME_CUDA_CHECK(cudaDeviceSynchronize());
  raise_pending_device_error(device < 0 ? current_device() : device);
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}

DeviceGuard::~DeviceGuard() {
  int now = 0;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

}  // namespace trireme::cuda
