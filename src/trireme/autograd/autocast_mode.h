// Autocast state: per thread and per device type, whether ops run in a lower precision and in
// which (bf16 or f16). Only the state lives here, low in the stack, so that ops can read it
// without depending on amp/; the policy (which op casts to what) is ops/autocast_policy.cpp and
// the user-facing guard is amp/autocast.h.
//
//   { AutocastModeGuard g(DeviceType::cpu, DType::bf16); logits = model.forward(ids); }
#pragma once

#include <optional>

#include "trireme/core/device.h"
#include "trireme/core/dtype.h"

namespace trireme::autograd {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  // the low dtype: bf16 or f16
};

AutocastState autocast_state(DeviceType device);
void set_autocast_state(DeviceType device, AutocastState state);
// The low dtype for tensors on `device` when autocast is on there; nullopt otherwise.
std::optional<DType> autocast_dtype(DeviceType device);

// Sets the state of one device type for a scope and restores the previous one after (so guards
// nest, and an inner `enabled = false` switches autocast off for a region).
class AutocastModeGuard {
 public:
  AutocastModeGuard(DeviceType device, AutocastState state);
  ~AutocastModeGuard();
  AutocastModeGuard(const AutocastModeGuard&) = delete;
  AutocastModeGuard& operator=(const AutocastModeGuard&) = delete;

 private:
  DeviceType device_;
  AutocastState previous_;
};

// Switches autocast off on every device type for a scope (the backward engine uses it: backward
// runs in the dtypes the forward chose, Note [autocast policy] in ops/autocast_policy.h).
class AutocastOffGuard {
 public:
  AutocastOffGuard();
  ~AutocastOffGuard();
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  AutocastState previous_[kNumDeviceTypes];
};

}  // namespace trireme::autograd
