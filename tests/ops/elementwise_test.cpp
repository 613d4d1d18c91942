// Elementwise ops through the op harness, plus error messages.
#include <gtest/gtest.h>

#include <cmath>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "op_harness.h"
#include "trireme/ops/elementwise.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

// Naive broadcasting reference: loops over the output index.
template <class F>
Tensor naive_binary(const Tensor& a, const Tensor& b, F f) {
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), "ref");
  Tensor out = zeros(s, DType::f64);
  double* o = out.data<double>();
  Shape idx(s.size(), 0);
  auto pick = [&](const Tensor& t) {
    Shape ti(size_t(t.dim()));
    for (size_t k = 0; k < ti.size(); ++k) {
      size_t d = k + s.size() - ti.size();
      ti[k] = t.sizes()[k] == 1 ? 0 : idx[d];
    }
    return t.at(ti);
  };
  for (int64_t n = 0; n < out.numel(); ++n) {
    o[n] = f(pick(a), pick(b));
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <class F>
Tensor naive_unary(const Tensor& a, F f) {
  Tensor out = clone(a);
  double* o = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = f(o[i]);
  return out;
}

Inputs positive(Generator& g, const Shape& s) { return {random_f64(s, g, 0.5, 2.0)}; }

}  // namespace

TEST(Elementwise, BinaryBroadcasting) {
  const std::vector<Shape> shapes = {{3, 1, 5}, {4, 5}};
  check_op({.name = "add", .shapes = shapes, .fn = [](const Inputs& x) { return add(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], std::plus<>()); }});
  check_op({.name = "sub", .shapes = shapes, .fn = [](const Inputs& x) { return sub(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], std::minus<>()); }});
  check_op({.name = "mul", .shapes = shapes, .fn = [](const Inputs& x) { return mul(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], std::multiplies<>()); }});
  check_op({.name = "div", .make_inputs = [](Generator& g) { return Inputs{random_f64({3, 1, 5}, g), random_f64({4, 5}, g, 0.5, 2)}; },
            .fn = [](const Inputs& x) { return div(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], std::divides<>()); }});
  check_op({.name = "pow", .make_inputs = [](Generator& g) { return Inputs{random_f64({2, 3}, g, 0.5, 2), random_f64({3}, g)}; },
            .fn = [](const Inputs& x) { return pow(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], [](double a, double b) { return std::pow(a, b); }); }});
  check_op({.name = "maximum", .shapes = {{7}, {7}}, .fn = [](const Inputs& x) { return maximum(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], [](double a, double b) { return a > b ? a : b; }); }});
}

TEST(Elementwise, Scalars) {
  check_op({.name = "add_scalar", .shapes = {{2, 3}}, .fn = [](const Inputs& x) { return x[0] + 2.5; },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return v + 2.5; }); }});
  check_op({.name = "mul_scalar", .shapes = {{2, 3}}, .fn = [](const Inputs& x) { return x[0] * -3.0; },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return v * -3.0; }); }});
  check_op({.name = "rsub", .shapes = {{2, 3}}, .fn = [](const Inputs& x) { return 1.0 - x[0]; },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return 1.0 - v; }); }});
  check_op({.name = "rdiv", .make_inputs = [](Generator& g) { return positive(g, {5}); }, .fn = [](const Inputs& x) { return 2.0 / x[0]; },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return 2.0 / v; }); }});
  check_op({.name = "pow_scalar", .make_inputs = [](Generator& g) { return positive(g, {5}); },
            .fn = [](const Inputs& x) { return pow(x[0], 1.7); },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return std::pow(v, 1.7); }); }});
}

TEST(Elementwise, Unary) {
  struct U { const char* name; Tensor (*fn)(const Tensor&); double (*ref)(double); bool positive; };
  const U cases[] = {
      {"neg", neg, [](double v) { return -v; }, false},
      {"exp", exp, [](double v) { return std::exp(v); }, false},
      {"log", log, [](double v) { return std::log(v); }, true},
      {"sqrt", sqrt, [](double v) { return std::sqrt(v); }, true},
      {"rsqrt", rsqrt, [](double v) { return 1 / std::sqrt(v); }, true},
      {"abs", abs, [](double v) { return std::abs(v); }, false},
      {"tanh", tanh, [](double v) { return std::tanh(v); }, false},
      {"sigmoid", sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, false},
      {"relu", relu, [](double v) { return v > 0 ? v : 0.0; }, false},
      {"silu", silu, [](double v) { return v / (1 + std::exp(-v)); }, false},
  };
  for (const U& u : cases) {
    auto fn = u.fn;
    auto ref = u.ref;
    check_op({.name = u.name,
              .make_inputs = [p = u.positive](Generator& g) { return Inputs{p ? random_f64({3, 4}, g, 0.5, 2) : random_f64({3, 4}, g, -2, 2)}; },
              .fn = [fn](const Inputs& x) { return fn(x[0]); },
              .reference = [ref](const Inputs& x) { return naive_unary(x[0], ref); }});
  }
  check_op({.name = "gelu_tanh", .make_inputs = [](Generator& g) { return Inputs{random_f64({3, 4}, g, -3, 3)}; },
            .fn = [](const Inputs& x) { return gelu(x[0], GeluApprox::tanh); },
            .reference = [](const Inputs& x) {
              return naive_unary(x[0], [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); });
            }});
  check_op({.name = "gelu_erf", .make_inputs = [](Generator& g) { return Inputs{random_f64({3, 4}, g, -3, 3)}; },
            .fn = [](const Inputs& x) { return gelu(x[0], GeluApprox::none); },
            .reference = [](const Inputs& x) { return naive_unary(x[0], [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }); }});
}

TEST(Elementwise, WhereAndMaskedFill) {
  auto inputs = [](Generator& g) {
    Tensor c = gt(random_f64({4, 1}, g), 0.0);
    return Inputs{random_f64({4, 3}, g), random_f64({3}, g), c};
  };
  check_op({.name = "where", .make_inputs = inputs,
            .fn = [](const Inputs& x) { return where(x[2], x[0], x[1]); },
            .reference = [](const Inputs& x) {
              Tensor out = zeros({4, 3}, DType::f64);
              for (int64_t i = 0; i < 4; ++i)
                for (int64_t j = 0; j < 3; ++j) out.data<double>()[i * 3 + j] = x[2].at({i, 0}) ? x[0].at({i, j}) : x[1].at({j});
              return out;
            }});
  check_op({.name = "masked_fill", .make_inputs = inputs,
            .fn = [](const Inputs& x) { return masked_fill(x[0], x[2], -7.0); },
            .reference = [](const Inputs& x) {
              Tensor out = clone(x[0]);
              for (int64_t i = 0; i < 4; ++i)
                for (int64_t j = 0; j < 3; ++j) if (x[2].at({i, 0})) out.data<double>()[i * 3 + j] = -7.0;
              return out;
            },
            .differentiable = {true, false, false}});  // x[1] is not an input of masked_fill
}

TEST(Elementwise, Comparisons) {
  Tensor a = from_vector<float>({1, 2, 3}, {3});
  Tensor b = from_vector<float>({2, 2, 2}, {3});
  EXPECT_EQ(lt(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(le(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(eq(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(ne(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(gt(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(ge(a, b).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1}));
}

TEST(Elementwise, ErrorsNameOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4}), c = zeros({2, 3}, DType::f64);
  try {
    add(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4] cannot be broadcast"), std::string::npos) << e.what();
  }
  try {
    mul(a, c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul: operands have different dtypes (f32 and f64)"), std::string::npos) << e.what();
  }
  Tensor i = zeros({3}, DType::i64);
  EXPECT_THROW(exp(i), Error);  // no kernel for i64 exp: a clear error, not UB
  try {
    exp(i);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for op 'exp' on device cpu for dtype i64"), std::string::npos) << e.what();
  }
}

// A contiguous tensor is one row for the CPU loops, which then split it among the threads; a
// tensor with fewer rows than threads is split along its rows. Every thread count gives the same
// bits, and every element is written (the tail of an uneven split included).
TEST(ElementwiseThreads, LongRowsSplitAmongThreadsGiveTheSameBits) {
#ifdef _OPENMP
  Generator gen(5);
  const int saved_threads = omp_get_max_threads();
  for (const Shape& shape : {Shape{100003}, Shape{3, 40001}, Shape{2, 3, 9001}}) {
    Tensor x = randn(shape, gen), y = randn(shape, gen);
    auto run = [&](int threads) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Tensor out = add(gelu(x), mul(x, y));
      omp_set_num_threads(saved);
      return out.to_vector<float>();
    };
    const auto one = run(1);
    for (int threads : {2, 3, 4}) EXPECT_EQ(run(threads), one) << "threads " << threads << ", shape " << str_cat(shape);
    // Every element written, the tail of an uneven split included: one product each, exact in float.
    omp_set_num_threads(4);
    const auto product = mul(x, y).to_vector<float>();
    omp_set_num_threads(saved_threads);
    const auto xs = x.to_vector<float>(), ys = y.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(product[i], xs[i] * ys[i]) << "element " << i << ", shape " << str_cat(shape);
  }
#endif
}
