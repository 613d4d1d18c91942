// The arithmetic the backward engine does on gradients itself: the implicit 1 of a scalar root,
// the sum of gradients that converge on one output, and a leaf's accumulation into .grad. It
// calls kernels directly (autograd sits below ops, see docs/ARCHITECTURE.md) and records nothing.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme::autograd {

// A tensor of ones shaped like t (same dtype and device).
Tensor grad_ones_like(const Tensor& t);
// a + b into a fresh tensor; both of one shape, dtype and device (`what` names them in errors),
// except that a 16-bit gradient of an f32 leaf meeting an f32 one is widened first.
Tensor grad_sum(const Tensor& a, const Tensor& b, const char* what);
// acc += incoming in place (acc may be a view, e.g. into a gradient bucket); bumps acc's version.
// A 16-bit incoming into an f32 acc (a weight's gradient under autocast, which the cast's
// backward leaves 16-bit) is widened as it is added: one pass, the bits of a cast and an add.
void grad_accumulate(Tensor& acc, const Tensor& incoming);
// Whether a leaf of dtype `leaf` takes a gradient of dtype `grad` as it is, widening it as it adds
// it (an f32 weight's bf16 or f16 gradient under autocast; ops/copy.cpp's cast backward passes
// such a gradient on uncast).
bool widened_on_accumulation(DType leaf, DType grad);
// A fresh contiguous copy of t in `dtype`.
Tensor grad_copy(const Tensor& t, DType dtype);

}  // namespace trireme::autograd
