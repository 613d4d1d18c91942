// Copies between devices, provided by a backend: the CUDA backend installs its copy when
// libtrireme loads (cuda/init.cpp), and to_device / copy_ (ops/copy.h) call it. The hook lives
// here, below both, so that the backend needs nothing above core.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// src and dst contiguous, of one dtype and size, at least one of them off the CPU.
using DeviceCopyFn = void (*)(const Tensor& src, Tensor& dst, bool non_blocking);
void set_device_copy(DeviceCopyFn fn);
// The installed copy; nullptr in a build without a device backend.
DeviceCopyFn device_copy_fn();

}  // namespace trireme
