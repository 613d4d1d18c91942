// Internal to the CUDA kernels: the per-element functions of the elementwise kernels
// (kernels/cuda/elementwise.cu), one definition shared with the fused elementwise kernels that
// NVRTC compiles at run time (kernels/cuda/fused.cu embeds this text), so that a fused chain
// computes each element as the unfused kernels do. Op codes are the ops' registered names
// prefixed u_ (unary) or b_ (binary).
#pragma once

#include "trireme/kernels/cuda/element_types.cuh"
#include "trireme/kernels/cuda/math.cuh"

namespace trireme::cuda_kernels {

enum UnaryOp : int {
  u_neg, u_exp, u_log, u_sqrt, u_rsqrt, u_abs, u_tanh, u_sigmoid, u_relu, u_silu, u_gelu_erf, u_gelu_tanh,
  u_add_scalar, u_mul_scalar, u_pow_scalar, u_rsub_scalar, u_rdiv_scalar,
};

enum BinaryOp : int {
  b_add, b_sub, b_mul, b_div, b_pow, b_maximum, b_tanh_backward, b_sigmoid_backward, b_relu_backward,
  b_silu_backward, b_gelu_erf_backward, b_gelu_tanh_backward,
};

template <class A>
__device__ __forceinline__ A apply_unary(int op, A x, A alpha) {
  if constexpr (is_float_acc_v<A>) {
    switch (op) {
      case u_neg: return -x;
      case u_exp: return m_exp(x);
      case u_log: return m_log(x);
      case u_sqrt: return m_sqrt(x);
      case u_rsqrt: return A(1) / m_sqrt(x);
      case u_abs: return m_abs(x);
      case u_tanh: return m_tanh(x);
      case u_sigmoid: return A(1) / (A(1) + m_exp(-x));
      case u_relu: return x > A(0) ? x : A(0);
      case u_silu: return x / (A(1) + m_exp(-x));
      case u_gelu_erf: return A(0.5) * x * (A(1) + m_erf(x * A(0.7071067811865476)));
      case u_gelu_tanh: return A(0.5) * x * (A(1) + m_tanh(A(0.7978845608028654) * (x + A(0.044715) * x * x * x)));
      case u_pow_scalar: return alpha == A(2) ? x * x : m_pow(x, alpha);
      case u_rsub_scalar: return alpha - x;
      case u_rdiv_scalar: return alpha / x;
      default: break;
    }
  }
  switch (op) {
    case u_add_scalar: return x + alpha;
    case u_mul_scalar: return x * alpha;
    default: return x;
  }
}

template <class A>
__device__ __forceinline__ A apply_binary(int op, A a, A b) {
  if constexpr (is_float_acc_v<A>) {
    switch (op) {
      case b_div: return a / b;
      case b_pow: return m_pow(a, b);
      case b_maximum: return a > b ? a : b;
      case b_tanh_backward: return a * (A(1) - b * b);
      case b_sigmoid_backward: return a * b * (A(1) - b);
      case b_relu_backward: return b > A(0) ? a : A(0);
      case b_silu_backward: {
        const A s = A(1) / (A(1) + m_exp(-b));
        return a * s * (A(1) + b * (A(1) - s));
      }
      case b_gelu_erf_backward:
        return a * (A(0.5) * (A(1) + m_erf(b * A(0.7071067811865476))) +
                    b * A(0.3989422804014327) * m_exp(A(-0.5) * b * b));
      case b_gelu_tanh_backward: {
        const A k = A(0.7978845608028654), c = A(0.044715);
        const A t = m_tanh(k * (b + c * b * b * b));
        const A dinner = k * (A(1) + A(3) * c * b * b);
        return a * (A(0.5) * (A(1) + t) + A(0.5) * b * (A(1) - t * t) * dinner);
      }
      default: break;
    }
  }
  switch (op) {
    case b_add: return a + b;
    case b_sub: return a - b;
    case b_mul: return a * b;
    default: return a;
  }
}

}  // namespace trireme::cuda_kernels
