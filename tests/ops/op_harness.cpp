// The op-test harness (see op_harness.h).
#include <gtest/gtest.h>

#include "op_harness.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme::testing {

Tensor random_f64(const Shape& shape, Generator& gen, double lo, double hi) {
  Tensor u = rand(shape, gen, DType::f64);
  return add(mul(u, hi - lo), lo);
}

Tensor noncontiguous_copy(const Tensor& t) {
  if (t.dim() == 0) return clone(t);
  Shape big = t.sizes();
  big.back() *= 2;
  Tensor buf = zeros(big, t.dtype());
  Tensor view = slice(buf, -1, 0, big.back(), 2);
  {
    NoGradGuard ng;
    copy_(view, t);
  }
  return view;
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << str_cat(actual.sizes()) << " vs expected "
                                         << str_cat(expected.sizes());
  }
  auto a = to_dtype(actual, DType::f64).to_vector<double>();
  auto e = to_dtype(expected, DType::f64).to_vector<double>();
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double ratio = std::abs(a[i] - e[i]) / (atol + rtol * std::abs(e[i]));
    if (!(ratio <= worst) || std::isnan(a[i]) != std::isnan(e[i])) {
      worst = std::isnan(ratio) ? INFINITY : ratio;
      worst_i = i;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst_i << " is " << a[worst_i] << ", expected "
                                       << e[worst_i] << " (error " << worst << "x the tolerance atol=" << atol
                                       << " rtol=" << rtol << ")";
}

namespace {

Inputs make(const OpCase& c, uint64_t seed) {
  Generator gen(seed);
  if (c.make_inputs) return c.make_inputs(gen);
  Inputs xs;
  for (const Shape& s : c.shapes) xs.push_back(random_f64(s, gen));
  return xs;
}

bool is_diff(const OpCase& c, const Inputs& xs, size_t i) {
  if (!is_floating(xs[i].dtype())) return false;
  return c.differentiable.empty() ? true : c.differentiable[i];
}

// Scalar objective: sum(out * r) for a fixed random r, so every output element matters.
double objective(const Tensor& out, const Tensor& r) { return sum(mul(to_dtype(out, DType::f64), r)).item(); }

}  // namespace

void check_op(const OpCase& c) {
  SCOPED_TRACE("op case: " + c.name);
  Inputs xs = make(c, 1234);
  Tensor out = c.fn(xs);

  // 1. forward vs reference
  if (c.reference) {
    Inputs cont;
    for (auto& x : xs) cont.push_back(contiguous(x));
    EXPECT_TRUE(all_close(out, c.reference(cont), 1e-10, 1e-9)) << "forward differs from the naive reference";
  }

  // 3. non-contiguous inputs give the same forward
  {
    Inputs nc;
    for (auto& x : xs) nc.push_back(noncontiguous_copy(x));
    EXPECT_TRUE(all_close(c.fn(nc), out, 1e-12, 1e-12)) << "non-contiguous inputs change the result";
  }

  // 2. backward vs central differences
  Inputs leaves;
  bool any = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    Tensor leaf = clone(xs[i]).detach();
    if (is_diff(c, xs, i)) {
      leaf.set_requires_grad(true);
      any = true;
    }
    leaves.push_back(leaf);
  }
  if (any && is_floating(out.dtype())) {
    Generator rg(99);
    Tensor r = random_f64(out.sizes(), rg);
    Tensor y = c.fn(leaves);
    Tensor loss = sum(mul(y, r));
    loss.backward();
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!is_diff(c, xs, i)) continue;
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      Tensor numeric = zeros(xs[i].sizes(), DType::f64);
      Tensor base = contiguous(xs[i]);
      double* p = base.data<double>();
      double* g = numeric.data<double>();
      NoGradGuard ng;
      for (int64_t k = 0; k < base.numel(); ++k) {
        double orig = p[k];
        Inputs plus = xs, minus = xs;
        p[k] = orig + c.fd_eps;
        plus[i] = clone(base);
        p[k] = orig - c.fd_eps;
        minus[i] = clone(base);
        p[k] = orig;
        g[k] = (objective(c.fn(plus), r) - objective(c.fn(minus), r)) / (2 * c.fd_eps);
      }
      ASSERT_TRUE(leaves[i].grad().defined()) << "no gradient reached input " << i;
      EXPECT_TRUE(all_close(leaves[i].grad(), numeric, c.grad_atol, c.grad_rtol)) << "backward differs from finite differences";
    }
  }

  // 4. f32 and bf16 forwards track f64
  if (c.check_low_precision && is_floating(out.dtype())) {
    for (DType dt : {DType::f32, DType::bf16}) {
      Inputs low;
      for (auto& x : xs) low.push_back(is_floating(x.dtype()) ? to_dtype(x, dt) : x);
      double tol = dt == DType::f32 ? 1e-5 : 2e-2;
      EXPECT_TRUE(all_close(to_dtype(c.fn(low), DType::f64), out, tol, tol)) << dtype_name(dt) << " forward";
    }
  }
}

}  // namespace trireme::testing
