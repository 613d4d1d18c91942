// The cross-device copy the CUDA backend installs with set_device_copy (see device_copy.cpp).
#pragma once

#include "trireme/core/tensor.h"

namespace trireme::cuda {

// src and dst contiguous, same dtype and size, at least one on a CUDA device.
void device_copy(const Tensor& src, Tensor& dst);

}  // namespace trireme::cuda
