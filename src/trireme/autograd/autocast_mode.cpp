// Autocast state per thread, like grad mode: a guard on one thread does not affect another.
#include "trireme/autograd/autocast_mode.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/error.h"

namespace trireme::autograd {
namespace {
thread_local AutocastState tls_autocast[kNumDeviceTypes];
thread_local CastCache* tls_cast_cache = nullptr;
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

AutocastOffGuard::AutocastOffGuard() : previous_cache_(tls_cast_cache) {
  for (int d = 0; d < kNumDeviceTypes; ++d) previous_[d] = tls_autocast[d], tls_autocast[d].enabled = false;
  tls_cast_cache = nullptr;
}
AutocastOffGuard::~AutocastOffGuard() {
  for (int d = 0; d < kNumDeviceTypes; ++d) tls_autocast[d] = previous_[d];
  tls_cast_cache = previous_cache_;
}

CastCache::CastCache(const std::vector<Tensor>& tensors) : tensors_(tensors), previous_(tls_cast_cache) {
  for (const Tensor& t : tensors_) {
    if (t.defined()) kept_[t.impl()];
  }
  tls_cast_cache = this;
}

CastCache::~CastCache() { tls_cast_cache = previous_; }

bool CastCache::keeps(const Tensor& t) const { return t.defined() && grad_enabled() && kept_.count(t.impl()) > 0; }

Tensor CastCache::find(const Tensor& t, DType dtype) const {
  if (!keeps(t)) return Tensor();
  for (const Kept& k : kept_.at(t.impl())) {
    if (k.cast.dtype() == dtype && k.version == t.version()) return k.cast;
  }
  return Tensor();
}

void CastCache::keep(const Tensor& t, const Tensor& cast) {
  if (!keeps(t)) return;
  auto& list = kept_.at(t.impl());
  std::erase_if(list, [&](const Kept& k) { return k.cast.dtype() == cast.dtype(); });  // an older version's
  list.push_back({t.version(), cast.detach()});
}

CastCache* active_cast_cache() { return tls_cast_cache; }

}  // namespace trireme::autograd
