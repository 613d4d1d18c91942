// Copies and conversions between dtypes and devices.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

Tensor clone(const Tensor& t);                      // always a fresh contiguous copy
Tensor contiguous(const Tensor& t);                 // t itself when already contiguous
Tensor to_dtype(const Tensor& t, DType dtype);      // t itself when already that dtype
// to_dtype(t, cast.dtype()) when `cast` already holds those values (autocast's cast cache,
// autograd/autocast_mode.h): no kernel runs; the result shares cast's memory and records
// to_dtype's backward, so the gradient reaches t as through a cast of its own.
Tensor to_dtype_reusing(const Tensor& t, const Tensor& cast);
// Copies to another device (t itself when already there). The copy is ordered on the current
// streams of both devices: work queued after it on them sees the data. With non_blocking, a copy
// from or into pinned host memory returns before it is done (see cuda/pinned.h, Note [pinned
// copies]); from pageable memory it is a blocking copy. The gradient is copied back to t's device.
Tensor to_device(const Tensor& t, Device device, bool non_blocking = false);
// Broadcasts src to dst and converts the dtype. A same-shape, same-dtype copy between contiguous
// tensors on two devices goes straight into dst, and honours non_blocking as to_device does.
Tensor& copy_(Tensor& dst, const Tensor& src, bool non_blocking = false);

}  // namespace trireme
