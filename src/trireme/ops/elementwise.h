// Elementwise ops with broadcasting, their in-place forms, and the arithmetic operators.
// Tensor-tensor ops need equal dtypes and devices (no implicit promotion: a mismatch is an
// error naming the op; inside an autocast region the narrower floating operand is cast up,
// Note [autocast policy] in ops/autocast_policy.h); tensor-scalar ops keep the tensor's dtype.
//
//   Tensor y = gelu(x * 2.0 + b);      // b broadcasts against x
//   add_(param, update, -lr);          // in place: param += -lr * update (bumps its version)
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// Binary, broadcasting.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);

// With a scalar.
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor rdiv(const Tensor& a, double s);  // s / a

// Unary.
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);
enum class GeluApprox { none, tanh };  // erf form (exact) or the tanh approximation (GPT-2)
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::tanh);

// Comparisons: bool results, no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);

// Selection: cond is bool and broadcasts with a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// In place (no autograd on tensors that require grad: those are refused with a clear error).
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1.0);  // a += alpha * b
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& add_(Tensor& a, double s);
Tensor& mul_(Tensor& a, double s);
Tensor& fill_(Tensor& a, double value);
Tensor& zero_(Tensor& a);

// Operators.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }

// Internal to ops: a view of t broadcast to `shape` (stride 0 on broadcast dims), no autograd.
Tensor broadcast_view(const Tensor& t, const Shape& shape);
// Refuses in-place writes that autograd could not follow (op names the caller).
void check_inplace(const char* op, const Tensor& t);

}  // namespace trireme

// Copy, dtype and device conversion, and factories are part of every op's vocabulary.
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
