// Shared by the graph tests: bitwise comparison of tensors and small random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "trireme/core/rng.h"
#include "trireme/core/tensor.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

namespace trireme::testing {

// On any device: GPU tensors are compared on the host.
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(to_device(a.detach(), Device::cpu())), cb = contiguous(to_device(b.detach(), Device::cpu()));
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * ca.element_size()) == 0;
}

inline Tensor random_tensor(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, g);
}

}  // namespace trireme::testing
