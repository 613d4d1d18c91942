// Copies and conversions between dtypes and devices.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

Tensor clone(const Tensor& t);                      // always a fresh contiguous copy
Tensor contiguous(const Tensor& t);                 // t itself when already contiguous
Tensor to_dtype(const Tensor& t, DType dtype);      // t itself when already that dtype
Tensor to_device(const Tensor& t, Device device);   // t itself when already there
Tensor& copy_(Tensor& dst, const Tensor& src);      // broadcasts src to dst; converts dtype

// Cross-device copies are provided by backends (CUDA registers one at start-up).
using DeviceCopyFn = void (*)(const Tensor& src, Tensor& dst);  // both contiguous, same dtype
void set_device_copy(DeviceCopyFn fn);

}  // namespace trireme
