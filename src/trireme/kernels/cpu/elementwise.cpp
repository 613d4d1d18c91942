// CPU elementwise kernels: unary, binary, comparison, where, and the activation backwards.
// Math runs in acc_t<T> (f32 for bf16/f16). Rows with unit strides take a plain loop the
// compiler vectorises; other rows take the strided loop.
#include <cmath>

#include "trireme/kernels/cpu/elementwise_ops.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

#define COMPARE_OP(Name, expr) \
  struct Name {                \
    template <class A> static bool f(A a, A b) { return expr; } \
  };
COMPARE_OP(EqOp, a == b)
COMPARE_OP(NeOp, a != b)
COMPARE_OP(LtOp, a < b)
COMPARE_OP(LeOp, a <= b)
COMPARE_OP(GtOp, a > b)
COMPARE_OP(GeOp, a >= b)
#undef COMPARE_OP

// ---- kernels ----
template <class T, class Op>
void unary_cpu(const Tensor& in, Tensor& out, double alpha) {
  using A = acc_t<T>;
  const A al = A(alpha);
  for_each_row<2>(out.sizes(), {loop_operand(out), loop_operand(in)}, [&](auto& p, auto& s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(Op::f(A(x[i]), al));
    } else {
      const int64_t so = s[0] / int64_t(sizeof(T)), sx = s[1] / int64_t(sizeof(T));
      for (int64_t i = 0; i < n; ++i) o[i * so] = T(Op::f(A(x[i * sx]), al));
    }
  });
}

template <class T, class Op>
void binary_cpu(const Tensor& a, const Tensor& b, Tensor& out) {
  using A = acc_t<T>;
  for_each_row<3>(out.sizes(), {loop_operand(out), loop_operand(a), loop_operand(b)},
                  [&](auto& p, auto& s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t e = sizeof(T);
    if (s[0] == e && s[1] == e && s[2] == e) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(Op::f(A(x[i]), A(y[i])));
    } else if (s[0] == e && s[1] == e && s[2] == 0) {
      const A yv = A(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = T(Op::f(A(x[i]), yv));
    } else {
      const int64_t so = s[0] / e, sx = s[1] / e, sy = s[2] / e;
      for (int64_t i = 0; i < n; ++i) o[i * so] = T(Op::f(A(x[i * sx]), A(y[i * sy])));
    }
  });
}

template <class T, class Op>
void compare_cpu(const Tensor& a, const Tensor& b, Tensor& out) {
  using A = acc_t<T>;
  for_each_row<3>(out.sizes(), {loop_operand(out), loop_operand(a), loop_operand(b)},
                  [&](auto& p, auto& s, int64_t n) {
    const int64_t so = s[0], sx = s[1] / int64_t(sizeof(T)), sy = s[2] / int64_t(sizeof(T));
    bool* o = reinterpret_cast<bool*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    for (int64_t i = 0; i < n; ++i) o[i * so] = Op::f(A(x[i * sx]), A(y[i * sy]));
  });
}

template <class T>
void where_cpu(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  for_each_row<4>(out.sizes(), {loop_operand(out), loop_operand(cond), loop_operand(a), loop_operand(b)},
                  [&](auto& p, auto& s, int64_t n) {
    constexpr int64_t e = sizeof(T);
    const int64_t so = s[0] / e, sc = s[1], sa = s[2] / e, sb = s[3] / e;
    T* o = reinterpret_cast<T*>(p[0]);
    const bool* c = reinterpret_cast<const bool*>(p[1]);
    const T* x = reinterpret_cast<const T*>(p[2]);
    const T* y = reinterpret_cast<const T*>(p[3]);
    for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? x[i * sa] : y[i * sb];
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_elementwise) {
  constexpr auto cpu = DeviceType::cpu;
#define FLOAT_UNARY(name, Op) \
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t>(name, cpu, []<class T>() { return &unary_cpu<T, Op>; })
#define FLOAT_BINARY(name, Op) \
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t>(name, cpu, []<class T>() { return &binary_cpu<T, Op>; })
#define ALL_COMPARE(name, Op)                                                          \
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>( \
      name, cpu, []<class T>() { return &compare_cpu<T, Op>; })
  FLOAT_UNARY("neg", NegOp);
  FLOAT_UNARY("exp", ExpOp);
  FLOAT_UNARY("log", LogOp);
  FLOAT_UNARY("sqrt", SqrtOp);
  FLOAT_UNARY("rsqrt", RsqrtOp);
  FLOAT_UNARY("abs", AbsOp);
  FLOAT_UNARY("tanh", TanhOp);
  FLOAT_UNARY("sigmoid", SigmoidOp);
  FLOAT_UNARY("relu", ReluOp);
  FLOAT_UNARY("silu", SiluOp);
  FLOAT_UNARY("gelu_erf", GeluErfOp);
  FLOAT_UNARY("gelu_tanh", GeluTanhOp);
  FLOAT_UNARY("pow_scalar", PowScalarOp);
  FLOAT_UNARY("rsub_scalar", RsubScalarOp);
  FLOAT_UNARY("rdiv_scalar", RdivScalarOp);
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "add_scalar", cpu, []<class T>() { return &unary_cpu<T, AddScalarOp>; });
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "mul_scalar", cpu, []<class T>() { return &unary_cpu<T, MulScalarOp>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "add", cpu, []<class T>() { return &binary_cpu<T, AddOp>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "sub", cpu, []<class T>() { return &binary_cpu<T, SubOp>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "mul", cpu, []<class T>() { return &binary_cpu<T, MulOp>; });
  FLOAT_BINARY("div", DivOp);
  FLOAT_BINARY("pow", PowOp);
  FLOAT_BINARY("maximum", MaximumOp);
  FLOAT_BINARY("tanh_backward", TanhBackwardOp);
  FLOAT_BINARY("sigmoid_backward", SigmoidBackwardOp);
  FLOAT_BINARY("relu_backward", ReluBackwardOp);
  FLOAT_BINARY("silu_backward", SiluBackwardOp);
  FLOAT_BINARY("gelu_erf_backward", GeluErfBackwardOp);
  FLOAT_BINARY("gelu_tanh_backward", GeluTanhBackwardOp);
  ALL_COMPARE("eq", EqOp);
  ALL_COMPARE("ne", NeOp);
  ALL_COMPARE("lt", LtOp);
  ALL_COMPARE("le", LeOp);
  ALL_COMPARE("gt", GtOp);
  ALL_COMPARE("ge", GeOp);
  registry.add_each<WhereKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "where", cpu, []<class T>() { return &where_cpu<T>; });
#undef FLOAT_UNARY
#undef FLOAT_BINARY
#undef ALL_COMPARE
}

}  // namespace trireme::cpu
