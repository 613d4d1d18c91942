// x times a host number that changes from step to step (a fine-tuning batch's share of the
// counted targets, SGD's learning rate): the same kernel as `x * s` (mul_scalar), forward and
// backward, so eager bits are unchanged; in a traced step (graph/trace.h) the number is an
// argument of both recorded calls, recomputed by `now` before every replay instead of frozen.
//
//   Tensor weighted = mul_step_scalar(loss, [this, i] { return weights_[i]; });
#pragma once

#include <functional>

#include "trireme/core/tensor.h"

namespace trireme {

Tensor mul_step_scalar(const Tensor& x, std::function<double()> now);

}  // namespace trireme
