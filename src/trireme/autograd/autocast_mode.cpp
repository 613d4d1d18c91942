// Autocast state per thread, like grad mode: a guard on one thread does not affect another.
#include "trireme/autograd/autocast_mode.h"

#include "trireme/core/error.h"

namespace trireme::autograd {
namespace {
thread_local AutocastState tls_autocast[kNumDeviceTypes];
}  // namespace

AutocastState autocast_state(DeviceType device) { return tls_autocast[int(device)]; }

void set_autocast_state(DeviceType device, AutocastState state) {
  TRIREME_CHECK(!state.enabled || state.dtype == DType::bf16 || state.dtype == DType::f16,
                "autocast: the low-precision dtype must be bf16 or f16, got ", state.dtype);
  tls_autocast[int(device)] = state;
}

std::optional<DType> autocast_dtype(DeviceType device) {
  const AutocastState& s = tls_autocast[int(device)];
  return s.enabled ? std::optional<DType>(s.dtype) : std::nullopt;
}

AutocastModeGuard::AutocastModeGuard(DeviceType device, AutocastState state)
    : device_(device), previous_(autocast_state(device)) {
  set_autocast_state(device, state);
}
AutocastModeGuard::~AutocastModeGuard() { tls_autocast[int(device_)] = previous_; }

AutocastOffGuard::AutocastOffGuard() {
  for (int d = 0; d < kNumDeviceTypes; ++d) previous_[d] = tls_autocast[d], tls_autocast[d].enabled = false;
}
AutocastOffGuard::~AutocastOffGuard() {
  for (int d = 0; d < kNumDeviceTypes; ++d) tls_autocast[d] = previous_[d];
}

}  // namespace trireme::autograd
