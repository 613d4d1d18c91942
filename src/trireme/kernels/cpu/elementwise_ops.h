// Internal to the CPU kernels: the per-element functions of the elementwise kernels
// (kernels/cpu/elementwise.cpp) and of the fused elementwise loops (kernels/cpu/fused.cpp), one
// definition for both so that a fused chain computes each element as the unfused kernels do.
// Each maps values of the accumulation type acc_t<T> (float for bf16/f16).
#pragma once

#include <cmath>

#include "trireme/kernels/cpu/vec_math.h"

namespace trireme::cpu {

// ---- functors: each maps acc-typed values (and a scalar alpha for unary ops) ----
#define UNARY_OP(Name, expr)                                   \
  struct Name {                                                \
    template <class A> [[gnu::always_inline]] static A f(A x, [[maybe_unused]] A alpha) { return expr; } \
  };
UNARY_OP(NegOp, -x)
UNARY_OP(ExpOp, std::exp(x))
UNARY_OP(LogOp, std::log(x))
UNARY_OP(SqrtOp, std::sqrt(x))
UNARY_OP(RsqrtOp, A(1) / std::sqrt(x))
UNARY_OP(AbsOp, std::abs(x))
UNARY_OP(TanhOp, std::tanh(x))
UNARY_OP(SigmoidOp, A(1) / (A(1) + exp_acc(-x)))
UNARY_OP(ReluOp, x > A(0) ? x : A(0))
UNARY_OP(SiluOp, x / (A(1) + exp_acc(-x)))
UNARY_OP(GeluErfOp, A(0.5) * x * (A(1) + std::erf(x * A(M_SQRT1_2))))
// GELU (tanh form) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): one
// vectorisable exp instead of a scalar tanhf call (GELU was a fifth of a CPU training step).
UNARY_OP(GeluTanhOp, x / (A(1) + exp_acc(A(-1.5957691216057308) * (x + A(0.044715) * x * x * x))))
UNARY_OP(AddScalarOp, x + alpha)
UNARY_OP(MulScalarOp, x * alpha)
UNARY_OP(PowScalarOp, alpha == A(2) ? x * x : std::pow(x, alpha))
UNARY_OP(RsubScalarOp, alpha - x)
UNARY_OP(RdivScalarOp, alpha / x)
#undef UNARY_OP

#define BINARY_OP(Name, expr) \
  struct Name {               \
    template <class A> [[gnu::always_inline]] static A f(A a, A b) { return expr; } \
  };
BINARY_OP(AddOp, a + b)
BINARY_OP(SubOp, a - b)
BINARY_OP(MulOp, a * b)
BINARY_OP(DivOp, a / b)
BINARY_OP(PowOp, std::pow(a, b))
BINARY_OP(MaximumOp, a > b ? a : b)
// Activation backwards: a = upstream gradient, b = the op's input x (or output y where noted).
BINARY_OP(TanhBackwardOp, a * (A(1) - b * b))        // b = y
BINARY_OP(SigmoidBackwardOp, a * b * (A(1) - b))     // b = y
BINARY_OP(ReluBackwardOp, b > A(0) ? a : A(0))
BINARY_OP(SiluBackwardOp, a * (A(1) / (A(1) + exp_acc(-b))) * (A(1) + b * (A(1) - A(1) / (A(1) + exp_acc(-b)))))
BINARY_OP(GeluErfBackwardOp,
          a * (A(0.5) * (A(1) + std::erf(b * A(M_SQRT1_2))) + b * A(0.3989422804014327) * std::exp(A(-0.5) * b * b)))
// With s = sigmoid(2u): d/dx [x s] = s + x * 2 s (1 - s) * du/dx, du/dx = k (1 + 3c x^2).
struct GeluTanhBackwardOp {
  template <class A> [[gnu::always_inline]] static A f(A g, A x) {
    const A k = A(0.7978845608028654), c = A(0.044715);
    A s = A(1) / (A(1) + exp_acc(A(-2) * k * (x + c * x * x * x)));
    return g * (s + A(2) * x * s * (A(1) - s) * k * (A(1) + A(3) * c * x * x));
  }
};
#undef BINARY_OP

}  // namespace trireme::cpu
