// CUDA elementwise kernels: unary, binary, comparison, where and the activation backwards,
// the twins of kernels/cpu/elementwise.cpp. Contiguous, unbroadcast, aligned operands (the
// activations of a model) take vector_map.cuh's 16-byte path with the op fixed at compile time:
// there the arithmetic of a per-element op switch would be the bottleneck, not the memory.
// Strided and broadcast operands take one kernel per dtype and family with the op as a run-time
// code, which keeps nvcc's compile time low.
#include "trireme/kernels/cuda/elementwise_ops.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/vector_map.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

enum CompareOp : int { c_eq, c_ne, c_lt, c_le, c_gt, c_ge };

template <class A>
__device__ __forceinline__ bool apply_compare(int op, A a, A b) {
  switch (op) {
    case c_eq: return a == b;
    case c_ne: return a != b;
    case c_lt: return a < b;
    case c_le: return a <= b;
    case c_gt: return a > b;
    default: return a >= b;
  }
}

// ---- launchers: one per (family, dtype); the op arrives as a value ----
template <class T>
void unary_launch(int op, const Tensor& in, Tensor& out, double alpha) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  LaunchContext ctx(out);
  const D* x = dptr<T>(in);
  D* o = dptr<T>(out);
  const A al = A(alpha);
  launch_elementwise<2>(ctx, out.sizes(), {&out.strides(), &in.strides()}, [=] __device__(const int64_t(&off)[2]) {
    o[off[0]] = from_acc<D>(apply_unary<A>(op, to_acc(x[off[1]]), al));
  });
}

template <class T>
void binary_launch(int op, const Tensor& a, const Tensor& b, Tensor& out) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  LaunchContext ctx(out);
  const D* x = dptr<T>(a);
  const D* y = dptr<T>(b);
  D* o = dptr<T>(out);
  launch_elementwise<3>(ctx, out.sizes(), {&out.strides(), &a.strides(), &b.strides()},
                        [=] __device__(const int64_t(&off)[3]) {
                          o[off[0]] = from_acc<D>(apply_binary<A>(op, to_acc(x[off[1]]), to_acc(y[off[2]])));
                        });
}

template <class T>
void compare_launch(int op, const Tensor& a, const Tensor& b, Tensor& out) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  LaunchContext ctx(out);
  const D* x = dptr<T>(a);
  const D* y = dptr<T>(b);
  bool* o = out.data<bool>();
  launch_elementwise<3>(ctx, out.sizes(), {&out.strides(), &a.strides(), &b.strides()},
                        [=] __device__(const int64_t(&off)[3]) {
                          o[off[0]] = apply_compare<A>(op, to_acc(x[off[1]]), to_acc(y[off[2]]));
                        });
}

// where moves bits: one kernel per element size serves every dtype.
template <class Bits>
void where_launch(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  LaunchContext ctx(out);
  const bool* c = cond.data<bool>();
  const Bits* x = static_cast<const Bits*>(a.data_ptr());
  const Bits* y = static_cast<const Bits*>(b.data_ptr());
  Bits* o = static_cast<Bits*>(out.data_ptr());
  launch_elementwise<4>(ctx, out.sizes(), {&out.strides(), &cond.strides(), &a.strides(), &b.strides()},
                        [=] __device__(const int64_t(&off)[4]) { o[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]]; });
}

template <class T>
using bits_t = std::conditional_t<sizeof(T) == 8, uint64_t,
               std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;

// Every operand contiguous with out's shape: no strides and no broadcasting to follow.
bool plain_operands(const Tensor& out, std::initializer_list<const Tensor*> in) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : in)
    if (!t->is_contiguous() || t->sizes() != out.sizes()) return false;
  return true;
}

// ---- the registered kernels: the op fixed for the vector path, passed on otherwise ----
template <class T, int Op>
void unary_cuda(const Tensor& in, Tensor& out, double alpha) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  if (plain_operands(out, {&in})) {
    const A al = A(alpha);
    const void* none = nullptr;
    if (try_vector_map(LaunchContext(out), out.numel(), dptr<T>(out), dptr<T>(in), none,
                       [=] __device__(A x) { return apply_unary<A>(Op, x, al); }))
      return;
  }
  unary_launch<T>(Op, in, out, alpha);
}
// b one row of out's last dim broadcast over its rows (a bias added after a GEMM): the ops hand
// kernels broadcast views, so b has out's shape, unit stride in the last dim and 0 elsewhere.
bool row_broadcast(const Tensor& out, const Tensor& b) {
  if (out.dim() < 2 || b.sizes() != out.sizes() || b.stride(-1) != 1) return false;
  for (int64_t d = 0; d + 1 < out.dim(); ++d)
    if (b.stride(d) != 0 && b.size(d) != 1) return false;
  return true;
}

template <class T, int Op>
void binary_cuda(const Tensor& a, const Tensor& b, Tensor& out) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  auto f = [] __device__(A x, A y) { return apply_binary<A>(Op, x, y); };
  if (plain_operands(out, {&a, &b}) &&
      try_vector_map(LaunchContext(out), out.numel(), dptr<T>(out), dptr<T>(a), dptr<T>(b), f))
    return;
  if (plain_operands(out, {&a}) && row_broadcast(out, b) &&
      try_vector_map(LaunchContext(out), out.numel(), dptr<T>(out), dptr<T>(a), dptr<T>(b), f, out.size(-1)))
    return;
  binary_launch<T>(Op, a, b, out);
}
template <class T, int Op>
void compare_cuda(const Tensor& a, const Tensor& b, Tensor& out) { compare_launch<T>(Op, a, b, out); }
template <class T>
void where_cuda(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) { where_launch<bits_t<T>>(cond, a, b, out); }

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_elementwise) {
  constexpr auto cuda = DeviceType::cuda;
#define FLOAT_UNARY(name, Op) \
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t>(name, cuda, []<class T>() { return &unary_cuda<T, Op>; })
#define FLOAT_BINARY(name, Op) \
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t>(name, cuda, []<class T>() { return &binary_cuda<T, Op>; })
#define ALL_COMPARE(name, Op)                                                          \
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>( \
      name, cuda, []<class T>() { return &compare_cuda<T, Op>; })
  FLOAT_UNARY("neg", u_neg);
  FLOAT_UNARY("exp", u_exp);
  FLOAT_UNARY("log", u_log);
  FLOAT_UNARY("sqrt", u_sqrt);
  FLOAT_UNARY("rsqrt", u_rsqrt);
  FLOAT_UNARY("abs", u_abs);
  FLOAT_UNARY("tanh", u_tanh);
  FLOAT_UNARY("sigmoid", u_sigmoid);
  FLOAT_UNARY("relu", u_relu);
  FLOAT_UNARY("silu", u_silu);
  FLOAT_UNARY("gelu_erf", u_gelu_erf);
  FLOAT_UNARY("gelu_tanh", u_gelu_tanh);
  FLOAT_UNARY("pow_scalar", u_pow_scalar);
  FLOAT_UNARY("rsub_scalar", u_rsub_scalar);
  FLOAT_UNARY("rdiv_scalar", u_rdiv_scalar);
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "add_scalar", cuda, []<class T>() { return &unary_cuda<T, u_add_scalar>; });
  registry.add_each<UnaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "mul_scalar", cuda, []<class T>() { return &unary_cuda<T, u_mul_scalar>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "add", cuda, []<class T>() { return &binary_cuda<T, b_add>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "sub", cuda, []<class T>() { return &binary_cuda<T, b_sub>; });
  registry.add_each<BinaryKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "mul", cuda, []<class T>() { return &binary_cuda<T, b_mul>; });
  FLOAT_BINARY("div", b_div);
  FLOAT_BINARY("pow", b_pow);
  FLOAT_BINARY("maximum", b_maximum);
  FLOAT_BINARY("tanh_backward", b_tanh_backward);
  FLOAT_BINARY("sigmoid_backward", b_sigmoid_backward);
  FLOAT_BINARY("relu_backward", b_relu_backward);
  FLOAT_BINARY("silu_backward", b_silu_backward);
  FLOAT_BINARY("gelu_erf_backward", b_gelu_erf_backward);
  FLOAT_BINARY("gelu_tanh_backward", b_gelu_tanh_backward);
  ALL_COMPARE("eq", c_eq);
  ALL_COMPARE("ne", c_ne);
  ALL_COMPARE("lt", c_lt);
  ALL_COMPARE("le", c_le);
  ALL_COMPARE("gt", c_gt);
  ALL_COMPARE("ge", c_ge);
  registry.add_each<WhereKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "where", cuda, []<class T>() { return &where_cuda<T>; });
#undef FLOAT_UNARY
#undef FLOAT_BINARY
#undef ALL_COMPARE
}

}  // namespace trireme::cuda_kernels
