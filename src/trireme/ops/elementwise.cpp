// Elementwise ops: argument checks, broadcasting, dispatch, and each op's backward beside it.
#include "trireme/ops/elementwise.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/op_count.h"
#include "trireme/ops/reduce.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const size_t n = shape.size(), m = size_t(t.dim());
  TRIREME_CHECK(m <= n, "broadcast: cannot broadcast shape ", t.sizes(), " to ", shape);
  Shape strides(n, 0);
  for (size_t i = 0; i < m; ++i) {
    int64_t s = t.sizes()[i];
    size_t d = i + n - m;
    TRIREME_CHECK(s == shape[d] || s == 1, "broadcast: cannot broadcast shape ", t.sizes(), " to ", shape);
    strides[d] = s == 1 ? 0 : t.strides()[i];
  }
  return t.alias(shape, strides, t.offset());
}

void check_inplace(const char* op, const Tensor& t) {
  TRIREME_CHECK(t.defined(), op, ": the destination is undefined");
  TRIREME_CHECK(!(autograd::grad_enabled() && t.requires_grad()), op, ": in-place write to a tensor of shape ",
                t.sizes(), " that requires grad; do it under NoGradGuard (e.g. an optimizer step) or on a clone");
}

namespace {

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  TRIREME_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  TRIREME_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device(), " and ",
                b.device(), ") with shapes ", a.sizes(), " and ", b.sizes());
  TRIREME_CHECK(a.dtype() == b.dtype(), op, ": operands have different dtypes (", a.dtype(), " and ",
                b.dtype(), ") with shapes ", a.sizes(), " and ", b.sizes(), "; convert one with to_dtype");
}

// Runs a binary kernel into a fresh tensor of the broadcast shape.
Tensor binary_forward(const char* op, const Tensor& a, const Tensor& b, DType out_dtype) {
  check_same(op, a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), op);
  Tensor out = Tensor::empty(shape, out_dtype, a.device());
  op_count_memory(double(a.numel() + b.numel()) * double(dtype_size(a.dtype())) +
                  double(out.numel()) * double(dtype_size(out_dtype)));
  find_kernel<BinaryKernel>(op, a.device(), a.dtype())(broadcast_view(a, shape), broadcast_view(b, shape), out);
  return out;
}

Tensor unary_forward(const char* op, const Tensor& x, double alpha = 0.0) {
  TRIREME_CHECK(x.defined(), op, ": the input is undefined");
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  op_count_memory(2 * double(x.numel()) * double(dtype_size(x.dtype())));
  find_kernel<UnaryKernel>(op, x.device(), x.dtype())(x, out, alpha);
  return out;
}

// Same-shape helper for the activation backward kernels.
Tensor backward_kernel(const char* op, const Tensor& grad, const Tensor& saved) {
  return binary_forward(op, grad, saved, grad.dtype());
}

// Records y = f(x) whose backward is a kernel of (grad, x or y).
Tensor unary_with_kernel_backward(const char* op, const char* backward_op, const Tensor& x, bool save_output) {
  Tensor out = unary_forward(op, x);
  if (any_requires_grad({&x})) {
    SavedTensor saved(save_output ? out : x);
    record(op, {&x}, {&out}, [saved, backward_op, op](const TensorList& g) -> TensorList {
      return {backward_kernel(backward_op, g[0], saved.unpack(op))};
    });
  }
  return out;
}

}  // namespace

// ---- binary ----
Tensor add(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return add((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("add", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    record("add", {&a, &b}, {&out}, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) -> TensorList {
      return {sum_to(g[0], sa), sum_to(g[0], sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return sub((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("sub", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    record("sub", {&a, &b}, {&out}, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) -> TensorList {
      return {sum_to(g[0], sa), sum_to(neg(g[0]), sb)};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return mul((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("mul", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    SavedTensor sa(need_b ? a : Tensor()), sb(need_a ? b : Tensor());
    record("mul", {&a, &b}, {&out}, [=, shape_a = a.sizes(), shape_b = b.sizes()](const TensorList& g) -> TensorList {
      Tensor ga = need_a ? sum_to(mul(g[0], sb.unpack("mul")), shape_a) : Tensor();
      Tensor gb = need_b ? sum_to(mul(g[0], sa.unpack("mul")), shape_b) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return div((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("div", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    SavedTensor sa(a), sb(b);
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("div", {&a, &b}, {&out}, [=, shape_a = a.sizes(), shape_b = b.sizes()](const TensorList& g) -> TensorList {
      const Tensor& bv = sb.unpack("div");
      Tensor ga = need_a ? sum_to(div(g[0], bv), shape_a) : Tensor();
      // d(a/b)/db = -a / b^2
      Tensor gb = need_b ? sum_to(neg(div(mul(g[0], sa.unpack("div")), mul(bv, bv))), shape_b) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return pow((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("pow", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    SavedTensor sa(a), sb(b), so(out);
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("pow", {&a, &b}, {&out}, [=, shape_a = a.sizes(), shape_b = b.sizes()](const TensorList& g) -> TensorList {
      const Tensor& av = sa.unpack("pow");
      const Tensor& bv = sb.unpack("pow");
      // d/da a^b = b a^(b-1);  d/db a^b = a^b log a
      Tensor ga = need_a ? sum_to(mul(g[0], mul(bv, pow(av, add(bv, -1.0)))), shape_a) : Tensor();
      Tensor gb = need_b ? sum_to(mul(g[0], mul(so.unpack("pow"), log(av))), shape_b) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return maximum((*c)[0], (*c)[1]);  // Note [autocast policy]
  Tensor out = binary_forward("maximum", a, b, a.dtype());
  if (any_requires_grad({&a, &b})) {
    SavedTensor sa(a), sb(b);
    record("maximum", {&a, &b}, {&out}, [=, shape_a = a.sizes(), shape_b = b.sizes()](const TensorList& g) -> TensorList {
      // The forward picks a only where a > b (b wins ties); the gradient follows the same choice.
      Tensor a_wins = gt(sa.unpack("maximum"), sb.unpack("maximum"));
      Tensor zero = zeros_like(g[0]);
      return {sum_to(where(a_wins, g[0], zero), shape_a), sum_to(where(a_wins, zero, g[0]), shape_b)};
    });
  }
  return out;
}

// ---- with a scalar ----
Tensor add(const Tensor& a, double s) {
  Tensor out = unary_forward("add_scalar", a, s);
  if (any_requires_grad({&a})) record("add_scalar", {&a}, {&out}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = unary_forward("mul_scalar", a, s);
  if (any_requires_grad({&a})) {
    record("mul_scalar", {&a}, {&out}, [s](const TensorList& g) -> TensorList { return {mul(g[0], s)}; });
  }
  return out;
}

Tensor pow(const Tensor& a, double exponent) {
  Tensor out = unary_forward("pow_scalar", a, exponent);
  if (any_requires_grad({&a})) {
    SavedTensor sa(a);
    record("pow_scalar", {&a}, {&out}, [sa, exponent](const TensorList& g) -> TensorList {
      return {mul(g[0], mul(pow(sa.unpack("pow_scalar"), exponent - 1.0), exponent))};
    });
  }
  return out;
}

Tensor rsub(const Tensor& a, double s) {
  Tensor out = unary_forward("rsub_scalar", a, s);
  if (any_requires_grad({&a})) record("rsub_scalar", {&a}, {&out}, [](const TensorList& g) -> TensorList { return {neg(g[0])}; });
  return out;
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = unary_forward("rdiv_scalar", a, s);
  if (any_requires_grad({&a})) {
    SavedTensor sa(a);
    record("rdiv_scalar", {&a}, {&out}, [sa, s](const TensorList& g) -> TensorList {
      const Tensor& av = sa.unpack("rdiv_scalar");
      return {mul(div(g[0], mul(av, av)), -s)};  // d(s/a)/da = -s / a^2
    });
  }
  return out;
}

// ---- unary ----
Tensor neg(const Tensor& x) {
  Tensor out = unary_forward("neg", x);
  if (any_requires_grad({&x})) record("neg", {&x}, {&out}, [](const TensorList& g) -> TensorList { return {neg(g[0])}; });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = unary_forward("exp", x);
  if (any_requires_grad({&x})) {
    SavedTensor so(out);
    record("exp", {&x}, {&out}, [so](const TensorList& g) -> TensorList { return {mul(g[0], so.unpack("exp"))}; });
  }
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = unary_forward("log", x);
  if (any_requires_grad({&x})) {
    SavedTensor sx(x);
    record("log", {&x}, {&out}, [sx](const TensorList& g) -> TensorList { return {div(g[0], sx.unpack("log"))}; });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_forward("sqrt", x);
  if (any_requires_grad({&x})) {
    SavedTensor so(out);
    record("sqrt", {&x}, {&out}, [so](const TensorList& g) -> TensorList {
      return {div(mul(g[0], 0.5), so.unpack("sqrt"))};  // 1 / (2 sqrt x)
    });
  }
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = unary_forward("rsqrt", x);
  if (any_requires_grad({&x})) {
    SavedTensor so(out);
    record("rsqrt", {&x}, {&out}, [so](const TensorList& g) -> TensorList {
      const Tensor& y = so.unpack("rsqrt");
      return {mul(mul(g[0], pow(y, 3.0)), -0.5)};  // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    });
  }
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = unary_forward("abs", x);
  if (any_requires_grad({&x})) {
    SavedTensor sx(x);
    record("abs", {&x}, {&out}, [sx](const TensorList& g) -> TensorList {
      const Tensor& xv = sx.unpack("abs");
      Tensor zero = zeros_like(g[0]);
      return {where(gt(xv, 0.0), g[0], where(lt(xv, 0.0), neg(g[0]), zero))};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x) { return unary_with_kernel_backward("tanh", "tanh_backward", x, true); }
Tensor sigmoid(const Tensor& x) { return unary_with_kernel_backward("sigmoid", "sigmoid_backward", x, true); }
Tensor relu(const Tensor& x) { return unary_with_kernel_backward("relu", "relu_backward", x, false); }
Tensor silu(const Tensor& x) { return unary_with_kernel_backward("silu", "silu_backward", x, false); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::tanh ? unary_with_kernel_backward("gelu_tanh", "gelu_tanh_backward", x, false)
                                    : unary_with_kernel_backward("gelu_erf", "gelu_erf_backward", x, false);
}

// ---- comparisons ----
Tensor eq(const Tensor& a, const Tensor& b) { return binary_forward("eq", a, b, DType::boolean); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_forward("ne", a, b, DType::boolean); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_forward("lt", a, b, DType::boolean); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_forward("le", a, b, DType::boolean); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_forward("gt", a, b, DType::boolean); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_forward("ge", a, b, DType::boolean); }
Tensor eq(const Tensor& a, double s) { return eq(a, scalar_tensor(s, a.dtype(), a.device())); }
Tensor lt(const Tensor& a, double s) { return lt(a, scalar_tensor(s, a.dtype(), a.device())); }
Tensor gt(const Tensor& a, double s) { return gt(a, scalar_tensor(s, a.dtype(), a.device())); }

// ---- selection ----
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (auto c = autocast_promote_args(a, b)) return where(cond, (*c)[0], (*c)[1]);
  check_same("where", a, b);
  TRIREME_CHECK(cond.dtype() == DType::boolean, "where: the condition must be bool, got ", cond.dtype(),
                " with shape ", cond.sizes());
  TRIREME_CHECK(cond.device() == a.device(), "where: the condition is on ", cond.device(), " but the values on ",
                a.device());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  find_kernel<WhereKernel>("where", a.device(), a.dtype())(broadcast_view(cond, shape), broadcast_view(a, shape),
                                                           broadcast_view(b, shape), out);
  if (any_requires_grad({&a, &b})) {
    SavedTensor sc(cond);
    record("where", {&a, &b}, {&out}, [sc, shape_a = a.sizes(), shape_b = b.sizes()](const TensorList& g) -> TensorList {
      const Tensor& c = sc.unpack("where");
      Tensor zero = zeros_like(g[0]);
      return {sum_to(where(c, g[0], zero), shape_a), sum_to(where(c, zero, g[0]), shape_b)};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  TRIREME_CHECK(mask.dtype() == DType::boolean, "masked_fill: the mask must be bool, got ", mask.dtype());
  Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  TRIREME_CHECK(shape == x.sizes(), "masked_fill: mask of shape ", mask.sizes(), " would change the shape of x ",
                x.sizes());
  return where(mask, scalar_tensor(value, x.dtype(), x.device()), x);
}

// ---- in place ----
Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  check_inplace("add_", a);
  check_same("add_", a, b);
  Tensor bb = broadcast_view(b, a.sizes());
  if (alpha == 1.0) {
    find_kernel<BinaryKernel>("add", a.device(), a.dtype())(a, bb, a);
  } else {
    Tensor scaled = Tensor::empty(a.sizes(), a.dtype(), a.device());
    find_kernel<UnaryKernel>("mul_scalar", a.device(), a.dtype())(bb, scaled, alpha);
    find_kernel<BinaryKernel>("add", a.device(), a.dtype())(a, scaled, a);
  }
  a.bump_version();
  return a;
}

Tensor& mul_(Tensor& a, const Tensor& b) {
  check_inplace("mul_", a);
  check_same("mul_", a, b);
  find_kernel<BinaryKernel>("mul", a.device(), a.dtype())(a, broadcast_view(b, a.sizes()), a);
  a.bump_version();
  return a;
}

Tensor& add_(Tensor& a, double s) {
  check_inplace("add_", a);
  find_kernel<UnaryKernel>("add_scalar", a.device(), a.dtype())(a, a, s);
  a.bump_version();
  return a;
}

Tensor& mul_(Tensor& a, double s) {
  check_inplace("mul_", a);
  find_kernel<UnaryKernel>("mul_scalar", a.device(), a.dtype())(a, a, s);
  a.bump_version();
  return a;
}

Tensor& fill_(Tensor& a, double value) {
  check_inplace("fill_", a);
  find_kernel<FillKernel>("fill", a.device(), a.dtype())(a, value);
  a.bump_version();
  return a;
}

Tensor& zero_(Tensor& a) { return fill_(a, 0.0); }

}  // namespace trireme
