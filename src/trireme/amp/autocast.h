// Autocast: run the matmul family and attention in bf16 or f16 while the parameters stay f32
// (fp32 master weights), and the numerically sensitive ops in f32. RAII, per thread, nestable.
//
//   amp::AutocastGuard autocast(DeviceType::cuda, DType::bf16);
//   Tensor loss = model.loss(ids, targets);   // linears in bf16, layer_norm and the loss in f32
//   ...                                       // leave the region before backward (or not:
//   loss.backward();                          // backward ignores autocast either way)
//   { amp::AutocastGuard off(DeviceType::cuda, DType::bf16, /*enabled=*/false); ... }  // f32 inside
//
// Which op does what: Note [autocast policy] in ops/autocast_policy.h. For f16, scale the loss
// (amp/grad_scaler.h); bf16 has f32's exponent range and needs no scaler.
#pragma once

#include "trireme/autograd/autocast_mode.h"

namespace trireme::amp {

class AutocastGuard {
 public:
  // dtype must be bf16 or f16 (checked, also when !enabled).
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  autograd::AutocastModeGuard guard_;
};

// Whether autocast is on for `device` on this thread, and with which dtype.
bool autocast_enabled(DeviceType device);
DType autocast_dtype(DeviceType device);  // bf16 when off

}  // namespace trireme::amp
