// Kernel registry lookup and its error hint.
#include "trireme/kernels/registry.h"
#include "trireme/kernels/scalar_slots.h"

namespace trireme {

KernelRegistry& kernel_registry() {
  static KernelRegistry registry;
  return registry;
}

const KernelRegistry::Entry* KernelRegistry::lookup(std::string_view op, DeviceType device, DType dtype) const {
  auto it = table_.find(std::string(op));
  if (it == table_.end()) return nullptr;
  return &it->second[size_t(device)][size_t(dtype)];
}

std::string KernelRegistry::missing_hint(std::string_view op, DeviceType device) const {
  auto it = table_.find(std::string(op));
  if (it == table_.end()) return " (the op has no kernels at all)";
  std::string have;
  for (int d = 0; d < kNumDTypes; ++d) {
    if (it->second[size_t(device)][size_t(d)].fn) have += (have.empty() ? "" : ", ") + std::string(dtype_name(DType(d)));
  }
  return have.empty() ? str_cat(" (the op has no kernels on ", device_type_name(device), ")")
                      : " (available dtypes there: " + have + ")";
}

}  // namespace trireme

namespace trireme {

KernelTape*& active_kernel_tape() {
  thread_local KernelTape* tape = nullptr;
  return tape;
}

int& RecomputationScope::depth() {
  thread_local int depth = 0;
  return depth;
}

ScalarSlots*& active_scalar_slots() {
  thread_local ScalarSlots* slots = nullptr;
  return slots;
}

}  // namespace trireme
