// Shared by the graph tests: bitwise comparison of tensors and small random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

// What a traced training step returns: the loss (its backward run), then each parameter's
// gradient, taken from the parameter so that the next run accumulates none into it.
inline std::vector<Tensor> backward_loss_and_take_grads(Tensor& loss, const std::vector<Tensor*>& params) {
  loss.backward();
  std::vector<Tensor> out = {loss.detach()};
  for (Tensor* t : params) {
    out.push_back(t->grad());
    t->set_grad(Tensor());
  }
  return out;
}

}  // namespace trireme::testing
