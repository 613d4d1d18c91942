// Reductions over dimensions (negative dims count from the end; empty dims = all dims).
// Low-precision inputs accumulate in f32 and return their own dtype.
#pragma once

#include <utility>

#include "trireme/core/tensor.h"

namespace trireme {

Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Σ x² over every element as a 0-dim f64 tensor on x's device, each element widened to f64 before
// it is squared (the gradient norm's sum: one read of x, no f64 copy of it). Gradient 2x.
Tensor sum_squares(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Variance with `correction` (1 = unbiased, Bessel; 0 = population).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// Max along one dim: (values, i64 indices of the first maximum). Gradient flows to that index.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // of all elements

// Sums a broadcast result back to `shape` (the gradient rule of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace trireme
