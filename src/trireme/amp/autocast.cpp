// The public autocast guard over the per-thread state in autograd/autocast_mode.h.
#include "trireme/amp/autocast.h"

#include "trireme/core/error.h"

namespace trireme::amp {
namespace {
autograd::AutocastState checked_state(DType dtype, bool enabled) {
  TRIREME_CHECK(dtype == DType::bf16 || dtype == DType::f16, "AutocastGuard: the dtype must be bf16 or f16, got ",
                dtype);
  return {.enabled = enabled, .dtype = dtype};
}
}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled)
    : guard_(device, checked_state(dtype, enabled)) {}

bool autocast_enabled(DeviceType device) { return autograd::autocast_state(device).enabled; }
DType autocast_dtype(DeviceType device) {
  const auto s = autograd::autocast_state(device);
  return s.enabled ? s.dtype : DType::bf16;
}

}  // namespace trireme::amp
