// Ops over many tensors in one kernel call: what gradient clipping does to every gradient of a
// step (parallel/grad_norm.h, optim/clip_grad.h). On a GPU a call per gradient costs the host a
// launch each: the eager GPT-2 step's clipping was about 450 launches, now a handful. A traced
// step (graph/trace.h) records the call per tensor instead, which its passes fuse and a CUDA graph
// replays without launches. The results are the same bits either way. No gradients flow through
// them.
//
//   Tensor squares = sum_squares_all(grads, device);    // 0-dim f64 on the grads' device
//   mul_all_(grads, factor);                            // every gradient *= factor
#pragma once

#include <span>

#include "trireme/core/tensor.h"

namespace trireme {

// The sum_squares of each tensor added in f64, in order, into zero: a 0-dim f64 tensor on
// `device`, where every x is (zero when there are none). One kernel call when they share a dtype
// and are contiguous (and nothing traces the calls), else sum_squares and an add per tensor.
Tensor sum_squares_all(std::span<const Tensor> xs, Device device);

// In place, every floating x *= factor, a one-element f64 tensor on their device, rounded once to
// x's accumulation type: the bits of mul_(x, s) with the factor's value as s. One kernel call per
// dtype of contiguous tensors when nothing traces the calls; else, for f32 and f64 tensors, a
// multiply by the factor cast to x's dtype (the same bits), and an error for 16-bit ones (the
// cast would round the factor).
void mul_all_(std::span<Tensor> xs, const Tensor& factor);
// The same with the factor on the host: mul_(x, s) on each, in one kernel call per dtype.
void mul_all_(std::span<Tensor> xs, double s);

}  // namespace trireme
