// The cross-device copy the CUDA backend installs with set_device_copy (see device_copy.cpp).
#pragma once

#include "trireme/core/tensor.h"

namespace trireme::cuda {

// src and dst contiguous, same dtype and size, at least one on a CUDA device. With
// `non_blocking`, a copy to or from pinned host memory returns once queued (Note [pinned copies]
// in pinned.h); device-to-device copies never wait for the host either way.
void device_copy(const Tensor& src, Tensor& dst, bool non_blocking);

}  // namespace trireme::cuda
