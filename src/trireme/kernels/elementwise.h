// Signatures of the elementwise kernel family (shared by the CPU and CUDA backends).
// Inputs arrive already broadcast to the output's shape (stride 0 along broadcast dims);
// `out` may be a non-contiguous view (in-place ops pass the destination itself).
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// out = f(in; alpha). alpha carries a scalar operand (add_scalar, pow_scalar, ...), else unused.
using UnaryKernel = void (*)(const Tensor& in, Tensor& out, double alpha);
// out = f(a, b). Comparison kernels are registered by the input dtype and write bool.
using BinaryKernel = void (*)(const Tensor& a, const Tensor& b, Tensor& out);
// out = cond ? a : b, registered by the dtype of a/b/out; cond is bool.
using WhereKernel = void (*)(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);
// out[...] = value.
using FillKernel = void (*)(Tensor& out, double value);
// dst = src converted to dst's dtype; same device, same shape, any strides. Registered by dst dtype.
using CopyKernel = void (*)(const Tensor& src, Tensor& dst);

}  // namespace trireme
