// Streams, the per-thread current stream of each device, and events.
#include "trireme/cuda/stream.h"

#include <array>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/device_error.h"

namespace trireme::cuda {
namespace {

constexpr int kMaxDevices = 64;

// Per thread, like the current device: a thread that switches streams affects no other.
std::array<CUstream_st*, kMaxDevices>& current_streams() {
  thread_local std::array<CUstream_st*, kMaxDevices> streams{};
  return streams;
}

int check_device(int device, const char* what) {
  if (device < 0) device = current_device();
  TRIREME_CHECK(device < device_count() && device < kMaxDevices, what, ": device ", device,
                " does not exist (", device_count(), " usable CUDA devices)");
  return device;
}

}  // namespace

Stream Stream::create(int device, bool high_priority) {
  device = check_device(device, "Stream::create");
  DeviceGuard g(device);
  int least = 0, greatest = 0;
  TRIREME_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  TRIREME_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least));
  return Stream(device, s);
}

void Stream::synchronize() const {
  DeviceGuard g(device_);
  TRIREME_CUDA_CHECK(cudaStreamSynchronize(handle_));
  raise_pending_device_error(device_);
}

bool Stream::query() const {
  DeviceGuard g(device_);
  cudaError_t err = cudaStreamQuery(handle_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  TRIREME_CUDA_CHECK(err);
  return true;
}

Stream current_stream(int device) {
  device = check_device(device, "cuda::current_stream");
  return Stream(device, current_streams()[size_t(device)]);
}

void set_current_stream(const Stream& stream) {
  int device = check_device(stream.device(), "cuda::set_current_stream");
  current_streams()[size_t(device)] = stream.handle();
}

StreamGuard::StreamGuard(const Stream& stream)
    : previous_stream_(current_stream(stream.device())), previous_device_(current_device()) {
  set_current_stream(stream);
  if (previous_device_ != stream.device()) set_device(stream.device());
}

StreamGuard::~StreamGuard() {
  current_streams()[size_t(previous_stream_.device())] = previous_stream_.handle();
  cudaSetDevice(previous_device_);
}

Event::Event(bool timing) : timing_(timing) {}

Event::~Event() {
  if (handle_) cudaEventDestroy(handle_);
}

void Event::record(const Stream& stream) {
  DeviceGuard g(stream.device());
  if (handle_ && device_ != stream.device()) {  // events belong to one device
    cudaEventDestroy(handle_);
    handle_ = nullptr;
  }
  if (!handle_) {
    TRIREME_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  TRIREME_CUDA_CHECK(cudaEventRecord(handle_, stream.handle()));
}

void Event::record() { record(current_stream()); }

void Event::wait(const Stream& stream) const {
  if (!handle_) return;  // never recorded: nothing to wait for
  DeviceGuard g(stream.device());
  TRIREME_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), handle_, 0));
}

void Event::synchronize() const {
  if (!handle_) return;
  TRIREME_CUDA_CHECK(cudaEventSynchronize(handle_));
  raise_pending_device_error();
}

bool Event::query() const {
  if (!handle_) return true;
  cudaError_t err = cudaEventQuery(handle_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  TRIREME_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  TRIREME_CHECK(timing_ && end.timing_, "Event::elapsed_ms: both events need timing (Event(true))");
  TRIREME_CHECK(handle_ && end.handle_, "Event::elapsed_ms: both events must be recorded first");
  float ms = 0.f;
  TRIREME_CUDA_CHECK(cudaEventElapsedTime(&ms, handle_, end.handle_));
  return ms;
}

}  // namespace trireme::cuda
