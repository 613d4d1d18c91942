// Signatures of the reduction kernel family.
#pragma once

#include <span>

#include "trireme/core/tensor.h"

namespace trireme {

// out has in's rank with size 1 on the reduced dims (keepdim form); out = sum over them.
using SumKernel = void (*)(const Tensor& in, Tensor& out);
// out (0-dim, f64) = Σ in², every element of a contiguous `in` widened to f64 before it is squared.
using SumSquaresKernel = void (*)(const Tensor& in, Tensor& out);
// out (0-dim, f64) = the sum_squares of each of `ins` added in f64, in order, into a zero: the bits
// of sum_squares per tensor and the adds, in one call (on a GPU three launches for any number of
// tensors, where the gradient norm of an eager step cost two launches per gradient). Registered by
// the dtype of every input; each is contiguous, all on out's device.
using SumSquaresManyKernel = void (*)(std::span<const Tensor* const> ins, Tensor& out);
// values/indices in keepdim form along `dim`; indices are i64, the first maximum wins.
using MaxDimKernel = void (*)(const Tensor& in, int64_t dim, Tensor& values, Tensor& indices);
// grad_in (zeroed by the caller) gets grad[..] at indices[..] along `dim`.
using MaxBackwardKernel = void (*)(const Tensor& grad, const Tensor& indices, int64_t dim, Tensor& grad_in);

}  // namespace trireme
