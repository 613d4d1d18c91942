// Autocast: which ops run in the low dtype and which in f32, gradients reaching f32 master
// parameters in f32, nesting and disabling of guards, promotion of mixed operands, and
// gradients through the casts against central finite differences in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "counting_tape.h"
#include "graph/graph_test_util.h"
#include "trireme/amp/autocast.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

namespace trireme {
namespace {

using amp::AutocastGuard;

Tensor leaf(const Shape& s, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return to_dtype(randn(s, gen), dtype).detach().set_requires_grad(true);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(to_dtype(a.detach(), DType::f64), to_dtype(b.detach(), DType::f64)))).item();
}

TEST(Autocast, LinearAndMatmulRunInBf16AndParametersGetF32Grads) {
  Tensor x = leaf({4, 8}, 1), w = leaf({6, 8}, 2), b = leaf({6}, 3), m = leaf({6, 5}, 4);
  Tensor y, z;
  {
    AutocastGuard autocast(DeviceType::cpu, DType::bf16);
    y = linear(x, w, b);
    z = matmul(y, m);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(z.dtype(), DType::bf16);
  // Against the f32 computation: bf16 rounding of inputs and outputs (8 bits of mantissa).
  const Tensor y32 = linear(x.detach(), w.detach(), b.detach());
  EXPECT_LE(max_abs_diff(y, y32), 0.05 * (1.0 + max(abs(y32)).item()));
  sum(z).backward();
  for (const Tensor* p : {&x, &w, &b, &m}) {
    ASSERT_TRUE(p->grad().defined());
    EXPECT_EQ(p->grad().dtype(), DType::f32) << "the gradient of an f32 leaf is f32";
  }
  // The same gradients without autocast, to bf16 precision.
  Tensor x2 = x.detach().set_requires_grad(true), w2 = w.detach().set_requires_grad(true);
  sum(matmul(linear(x2, w2, b.detach()), m.detach())).backward();
  EXPECT_LE(max_abs_diff(w.grad(), w2.grad()), 0.05 * (1.0 + max(abs(w2.grad())).item()));
  EXPECT_LE(max_abs_diff(x.grad(), x2.grad()), 0.05 * (1.0 + max(abs(x2.grad())).item()));
}

// A weight's 16-bit gradients go into its f32 .grad as they are and are widened as they are added:
// from the second backward on (a later micro-batch), one accumulate_widening per weight where a
// cast and an add ran, with their bits. Also where a 16-bit and an f32 gradient meet (a weight
// used cast and uncast, as a tied embedding is): the 16-bit one is widened into a copy of the
// f32 one, with no f32 copy of it beside them.
TEST(Autocast, AWeightsLowGradientsAreWidenedAsTheyAccumulateWithTheBitsOfACastAndAnAdd) {
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor w = leaf({6, 8}, 2), b = leaf({6}, 3);
    // The reference: 16-bit leaves standing for the casts, their gradients cast and added by hand.
    Tensor w_ref, b_ref;
    std::map<std::string, int> later_calls;
    for (int micro = 0; micro < 3; ++micro) {
      const Tensor x = leaf({4, 8}, 10 + micro).detach();
      Tensor y;
      {
        AutocastGuard autocast(DeviceType::cpu, low);
        y = add(sum(linear(x, w, b)), sum(w));  // w also reaches the loss in f32
      }
      trireme::testing::CountingTape tape;
      y.backward();
      if (micro == 2) later_calls = tape.calls;
      Tensor w16 = to_dtype(w.detach(), low).set_requires_grad(true), b16 = to_dtype(b.detach(), low).set_requires_grad(true);
      Tensor w32 = w.detach().set_requires_grad(true);
      {
        AutocastGuard autocast(DeviceType::cpu, low);
        add(sum(linear(x, w16, b16)), sum(w32)).backward();
      }
      const Tensor w_step = add(to_dtype(w16.grad(), DType::f32), w32.grad());
      const Tensor b_step = to_dtype(b16.grad(), DType::f32);
      w_ref = micro == 0 ? w_step : add(w_ref, w_step);
      b_ref = micro == 0 ? b_step : add(b_ref, b_step);
      ASSERT_EQ(w.grad().dtype(), DType::f32);
      EXPECT_TRUE(testing::bitwise_equal(w.grad(), w_ref)) << low << " micro-batch " << micro;
      EXPECT_TRUE(testing::bitwise_equal(b.grad(), b_ref)) << low << " micro-batch " << micro;
    }
    EXPECT_EQ(later_calls["accumulate_widening"], 2) << low << ": b's, and w's into a copy of its f32 one";
    EXPECT_EQ(later_calls["add"], 1) << low << ": w's summed gradients into w.grad";
  }
}

TEST(Autocast, AttentionRunsInTheLowDtype) {
  Tensor q = leaf({1, 2, 4, 8}, 5), k = leaf({1, 2, 4, 8}, 6), v = leaf({1, 2, 4, 8}, 7);
  Tensor y;
  {
    AutocastGuard autocast(DeviceType::cpu, DType::f16);
    y = scaled_dot_product_attention(q, k, v);
  }
  EXPECT_EQ(y.dtype(), DType::f16);
  sum(y).backward();
  EXPECT_EQ(q.grad().dtype(), DType::f32);
  EXPECT_EQ(v.grad().dtype(), DType::f32);
}

TEST(Autocast, LossesNormsAndSoftmaxRunInF32) {
  Tensor logits = leaf({5, 7}, 8, DType::bf16);
  Tensor targets = from_vector<int64_t>({0, 3, 6, 2, 1}, {5});
  Tensor w = leaf({7}, 9), bias = leaf({7}, 10);
  AutocastGuard autocast(DeviceType::cpu, DType::bf16);
  Tensor loss = cross_entropy(logits, targets);
  EXPECT_EQ(loss.dtype(), DType::f32);
  EXPECT_EQ(softmax(logits).dtype(), DType::f32);
  EXPECT_EQ(log_softmax(logits).dtype(), DType::f32);
  EXPECT_EQ(layer_norm(logits, w, bias).dtype(), DType::f32);  // bf16 input, f32 parameters
  EXPECT_EQ(rms_norm(logits, w).dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(logits.grad().dtype(), DType::bf16) << "the gradient comes back in the input's dtype";
  // f64 stays f64 (asked for on purpose).
  Tensor a = leaf({3, 3}, 11, DType::f64);
  EXPECT_EQ(matmul(a, a).dtype(), DType::f64);
}

TEST(Autocast, GuardsNestDisableAndRestore) {
  Tensor x = leaf({2, 3}, 12), w = leaf({4, 3}, 13);
  EXPECT_FALSE(amp::autocast_enabled(DeviceType::cpu));
  {
    AutocastGuard outer(DeviceType::cpu, DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
    {
      AutocastGuard inner(DeviceType::cpu, DType::f16);
      EXPECT_EQ(linear(x, w).dtype(), DType::f16);
      {
        AutocastGuard off(DeviceType::cpu, DType::bf16, /*enabled=*/false);
        EXPECT_EQ(linear(x, w).dtype(), DType::f32);
        EXPECT_FALSE(amp::autocast_enabled(DeviceType::cpu));
      }
      EXPECT_EQ(amp::autocast_dtype(DeviceType::cpu), DType::f16);
    }
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
    {
      // A CUDA region does not touch CPU tensors.
      AutocastGuard cuda_off(DeviceType::cuda, DType::f16, false);
      EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
    }
  }
  EXPECT_FALSE(amp::autocast_enabled(DeviceType::cpu));
  EXPECT_EQ(linear(x, w).dtype(), DType::f32);
  try {
    AutocastGuard bad(DeviceType::cpu, DType::f32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AutocastGuard: the dtype must be bf16 or f16, got f32"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(amp::autocast_enabled(DeviceType::cpu)) << "a failed guard leaves the state alone";
}

TEST(Autocast, MixedOperandsPromoteInsideAutocastOnly) {
  Tensor stream = leaf({2, 4}, 14), low = leaf({2, 4}, 15, DType::bf16), h = leaf({2, 4}, 16, DType::f16);
  {
    AutocastGuard autocast(DeviceType::cpu, DType::bf16);
    Tensor r = add(stream, low);  // the residual add: f32 stream + bf16 branch
    EXPECT_EQ(r.dtype(), DType::f32);
    EXPECT_EQ(mul(low, stream).dtype(), DType::f32);
    EXPECT_EQ(add(low, h).dtype(), DType::f32) << "bf16 with f16 meet in f32";
    sum(r).backward();
  }
  EXPECT_EQ(stream.grad().dtype(), DType::f32);
  EXPECT_EQ(low.grad().dtype(), DType::bf16);
  EXPECT_THROW(add(stream, low), Error) << "outside autocast a dtype mismatch stays an error";
}

// The gradient of sum(r * matmul(x, W)) computed through bf16 casts, against central differences
// of the same function in f64 (no casts): they agree to bf16 precision. Values are multiples of
// 1/8 so that the casts of x and W are exact and only the products' rounding differs.
TEST(Autocast, GradientsThroughCastsMatchFiniteDifferences) {
  auto grid = [](const Shape& s, int salt) {
    std::vector<double> v;
    for (int64_t i = 0; i < shape_numel(s); ++i) v.push_back(double((i * 7 + salt) % 11 - 5) / 8.0);
    return from_vector<double>(v, s);
  };
  const Tensor x64 = grid({3, 4}, 1), w64 = grid({4, 5}, 2), r64 = grid({3, 5}, 3);
  Tensor x = to_dtype(x64, DType::f32).detach().set_requires_grad(true);
  Tensor w = to_dtype(w64, DType::f32).detach().set_requires_grad(true);
  {
    AutocastGuard autocast(DeviceType::cpu, DType::bf16);
    Tensor y = matmul(x, w);
    sum(mul(y, to_dtype(r64, DType::f32))).backward();
  }
  auto f = [&](const Tensor& xv, const Tensor& wv) { return sum(mul(matmul(xv, wv), r64)).item(); };
  const double h = 1e-4;
  NoGradGuard no_grad;
  for (int which = 0; which < 2; ++which) {
    const Tensor& base = which == 0 ? x64 : w64;
    const Tensor grad = to_dtype(which == 0 ? x.grad() : w.grad(), DType::f64);
    for (int64_t i = 0; i < base.numel(); ++i) {
      Tensor plus = clone(base), minus = clone(base);
      plus.data<double>()[i] += h;
      minus.data<double>()[i] -= h;
      const double fd = which == 0 ? (f(plus, w64) - f(minus, w64)) / (2 * h) : (f(x64, plus) - f(x64, minus)) / (2 * h);
      const double g = grad.data<double>()[i];
      EXPECT_NEAR(g, fd, 1e-2 * (1.0 + std::abs(fd))) << (which == 0 ? "x" : "W") << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace trireme
