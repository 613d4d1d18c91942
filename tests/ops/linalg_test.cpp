// matmul and linear through the op harness (naive loop references), error messages, and bf16.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "op_harness.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

using trireme::testing::expect_error;

// Advances a row-major multi-index over `shape`.
void next_index(Shape& idx, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

// numpy matmul with loops: promote 1-D operands, broadcast batch dims, triple loop per batch.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.sizes(), sb = b.sizes();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const Tensor a2 = reshape(a, sa), b2 = reshape(b, sb);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "naive_matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = zeros(out_shape, DType::f64);
  double* o = out.data<double>();
  // The index of operand t (batch dims bt) for the broadcast batch index bi and matrix index (r, c).
  auto index_of = [&](const Shape& bt, const Shape& bi, int64_t r, int64_t c) {
    Shape ti;
    for (size_t i = 0; i < bt.size(); ++i) ti.push_back(bt[i] == 1 ? 0 : bi[i + bi.size() - bt.size()]);
    ti.push_back(r);
    ti.push_back(c);
    return ti;
  };
  Shape bi(batch.size(), 0);
  const int64_t nbatch = shape_numel(batch);
  for (int64_t t = 0; t < nbatch; ++t, next_index(bi, batch)) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += a2.at(index_of(ba, bi, i, p)) * b2.at(index_of(bb, bi, p, j));
        o[(t * m + i) * n + j] = acc;
      }
    }
  }
  Shape final_shape = batch;
  if (a.dim() > 1) final_shape.push_back(m);
  if (b.dim() > 1) final_shape.push_back(n);
  return reshape(out, final_shape);
}

// y[r, o] = sum_i x[r, i] w[o, i] + bias[o] over the rows r of x flattened to (N, in).
Tensor naive_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t in = w.size(1), outf = w.size(0), rows = x.numel() / in;
  Shape out_shape = x.sizes();
  out_shape.back() = outf;
  Tensor out = zeros(out_shape, DType::f64);
  const double* px = x.data<double>();
  const double* pw = w.data<double>();
  double* o = out.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < outf; ++j) {
      double acc = bias.defined() ? bias.data<double>()[j] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += px[r * in + i] * pw[j * in + i];
      o[r * outf + j] = acc;
    }
  }
  return out;
}

OpCase matmul_case(const std::string& name, std::vector<Shape> shapes) {
  return {.name = name, .shapes = std::move(shapes), .fn = [](const Inputs& x) { return matmul(x[0], x[1]); },
          .reference = [](const Inputs& x) { return naive_matmul(x[0], x[1]); }};
}


}  // namespace

TEST(Matmul, Shapes) {
  check_op(matmul_case("2-D", {{3, 4}, {4, 5}}));
  check_op(matmul_case("1-D x 2-D", {{4}, {4, 5}}));
  check_op(matmul_case("2-D x 1-D", {{3, 4}, {4}}));
  check_op(matmul_case("1-D x 1-D", {{4}, {4}}));
  check_op(matmul_case("3-D x 2-D (folded into one GEMM)", {{2, 3, 4}, {4, 5}}));
  check_op(matmul_case("2-D x 3-D", {{3, 4}, {2, 4, 5}}));
  check_op(matmul_case("3-D x 1-D", {{2, 3, 4}, {4}}));
  check_op(matmul_case("1-D x 3-D", {{4}, {2, 4, 5}}));
  check_op(matmul_case("batched, broadcast", {{2, 1, 3, 4}, {5, 4, 2}}));
  check_op(matmul_case("batched, same batch", {{3, 2, 4}, {3, 4, 2}}));
  check_op(matmul_case("empty inner dim", {{2, 0}, {0, 3}}));
}

TEST(Matmul, TransposedOperands) {
  // Transposed views go to BLAS as transposed operands (no copy); the results must not change.
  check_op({.name = "aT b", .shapes = {{4, 3}, {4, 5}},
            .fn = [](const Inputs& x) { return matmul(transpose(x[0], 0, 1), x[1]); },
            .reference = [](const Inputs& x) { return naive_matmul(contiguous(transpose(x[0], 0, 1)), x[1]); }});
  check_op({.name = "a bT", .shapes = {{3, 4}, {5, 4}},
            .fn = [](const Inputs& x) { return matmul(x[0], transpose(x[1], 0, 1)); },
            .reference = [](const Inputs& x) { return naive_matmul(x[0], contiguous(transpose(x[1], 0, 1))); }});
  check_op({.name = "aT bT batched", .shapes = {{2, 4, 3}, {2, 5, 4}},
            .fn = [](const Inputs& x) { return matmul(transpose(x[0], -1, -2), transpose(x[1], -1, -2)); },
            .reference = [](const Inputs& x) {
              return naive_matmul(contiguous(transpose(x[0], -1, -2)), contiguous(transpose(x[1], -1, -2)));
            }});
  check_op({.name = "permuted batch (attention-like q kT)", .shapes = {{3, 2, 4}, {3, 2, 4}},
            .fn = [](const Inputs& x) {
              Tensor q = permute(x[0], {1, 0, 2});  // (2, 3, 4), batch stride 4, row stride 8
              Tensor k = permute(x[1], {1, 2, 0});  // (2, 4, 3)
              return matmul(q, k);
            },
            .reference = [](const Inputs& x) {
              return naive_matmul(contiguous(permute(x[0], {1, 0, 2})), contiguous(permute(x[1], {1, 2, 0})));
            }});
  check_op({.name = "expanded (stride 0) operand", .shapes = {{1, 3, 4}, {2, 4, 5}},
            .fn = [](const Inputs& x) { return matmul(expand(x[0], {2, 3, 4}), x[1]); },
            .reference = [](const Inputs& x) { return naive_matmul(contiguous(expand(x[0], {2, 3, 4})), x[1]); }});
}

TEST(Linear, WithAndWithoutBias) {
  check_op({.name = "linear 2-D with bias", .shapes = {{3, 4}, {5, 4}, {5}},
            .fn = [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
            .reference = [](const Inputs& x) { return naive_linear(x[0], x[1], x[2]); }});
  check_op({.name = "linear 2-D without bias", .shapes = {{3, 4}, {5, 4}},
            .fn = [](const Inputs& x) { return linear(x[0], x[1]); },
            .reference = [](const Inputs& x) { return naive_linear(x[0], x[1], Tensor()); }});
  check_op({.name = "linear 3-D input", .shapes = {{2, 3, 4}, {5, 4}, {5}},
            .fn = [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
            .reference = [](const Inputs& x) { return naive_linear(x[0], x[1], x[2]); }});
  check_op({.name = "linear 1-D input", .shapes = {{4}, {5, 4}, {5}},
            .fn = [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
            .reference = [](const Inputs& x) { return naive_linear(x[0], x[1], x[2]); }});
  check_op({.name = "linear transposed weight", .shapes = {{2, 3, 4}, {4, 5}, {5}},
            .fn = [](const Inputs& x) { return linear(x[0], transpose(x[1], 0, 1), x[2]); },
            .reference = [](const Inputs& x) { return naive_linear(x[0], contiguous(transpose(x[1], 0, 1)), x[2]); }});
}

TEST(Linear, MatchesMatmulAtTrainingSizes) {
  // Big enough for OpenBLAS to thread and for the folded (N, in) GEMM: linear == x·Wᵀ + b in f32.
  Generator gen(7);
  Tensor x = randn({4, 33, 64}, gen), w = randn({48, 64}, gen), b = randn({48}, gen);
  Tensor y = linear(x, w, b);
  Tensor ref = add(matmul(x, transpose(w, 0, 1)), b);
  EXPECT_TRUE(all_close(y, ref, 1e-4, 1e-4));
}

TEST(Linear, BackwardShapesAndValues) {
  // The three gradients against their closed forms, in f32 with a 3-D input.
  Generator gen(3);
  Tensor x = randn({2, 5, 6}, gen).set_requires_grad(true);
  Tensor w = randn({4, 6}, gen).set_requires_grad(true);
  Tensor b = randn({4}, gen).set_requires_grad(true);
  Tensor g = randn({2, 5, 4}, gen);
  linear(x, w, b).backward(g);
  NoGradGuard ng;
  Tensor g2 = reshape(g, {10, 4}), x2 = reshape(x.detach(), {10, 6});
  EXPECT_TRUE(all_close(x.grad(), reshape(matmul(g2, w.detach()), {2, 5, 6}), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(w.grad(), matmul(transpose(g2, 0, 1), x2), 1e-5, 1e-5));
  // The weight gradient's kernel makes the bias gradient too (matmul_row_sums), on the CPU by the
  // sum kernel over g's columns: the same bits as sum.
  EXPECT_EQ(b.grad().to_vector<float>(), sum(g2, {0}).to_vector<float>());
}

TEST(Matmul, Bf16CloseToF32) {
  Generator gen(11);
  Tensor a = randn({2, 40, 64}, gen), b = randn({64, 24}, gen);
  Tensor ref = matmul(a, b);
  Tensor low = matmul(to_dtype(a, DType::bf16), to_dtype(b, DType::bf16));
  EXPECT_EQ(low.dtype(), DType::bf16);
  // Inputs rounded to bf16 (rel. error 2^-9 each) over 64 terms of size ~1, then the output rounded.
  EXPECT_TRUE(all_close(low, ref, 0.1, 0.02));
  Tensor low16 = matmul(to_dtype(a, DType::f16), to_dtype(b, DType::f16));
  EXPECT_TRUE(all_close(low16, ref, 0.02, 0.005));
  // linear with bias in bf16, forward and backward run and stay close.
  Tensor w = randn({24, 64}, gen), bias = randn({24}, gen);
  Tensor lw = to_dtype(w, DType::bf16).detach().set_requires_grad(true);
  Tensor ly = linear(to_dtype(a, DType::bf16), lw, to_dtype(bias, DType::bf16));
  EXPECT_TRUE(all_close(ly, linear(a, w, bias), 0.1, 0.02));
  sum(ly).backward();
  EXPECT_EQ(lw.grad().dtype(), DType::bf16);
  // d sum(y) / dW[o, i] = sum over rows of x[., i], for every o.
  Tensor col_sums = reshape(sum(reshape(a, {-1, 64}), {0}), {1, 64});
  EXPECT_TRUE(all_close(lw.grad(), expand(col_sums, {24, 64}), 0.1, 0.02));
}

TEST(Addmm, AccumulatesIntoOutInEveryDtype) {
  // out += a · b, with transposed operands (as the weight gradients use it); bf16 accumulates in
  // f32 from out's value, so it is as close to the f64 answer as one bf16 matmul.
  Generator gen(5);
  const Tensor a = randn({6, 9}, gen, DType::f64), b = randn({5, 9}, gen, DType::f64), c = randn({6, 5}, gen, DType::f64);
  const Tensor want = add(c, naive_matmul(a, contiguous(transpose(b, 0, 1))));
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor out = clone(to_dtype(c, dt));
    addmm_(out, to_dtype(a, dt), transpose(to_dtype(b, dt), 0, 1));
    const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 0.05;
    EXPECT_TRUE(all_close(to_dtype(out, DType::f64), want, tol, tol));
  }
  // Twice: the second product lands on the first.
  Tensor out = zeros({6, 5}, DType::f64);
  addmm_(out, a, contiguous(transpose(b, 0, 1)));
  addmm_(out, a, contiguous(transpose(b, 0, 1)));
  EXPECT_TRUE(all_close(out, mul(naive_matmul(a, contiguous(transpose(b, 0, 1))), 2.0), 1e-12, 1e-12));
}

TEST(Addmm, IntoOutFromASeparateAddendInEveryDtype) {
  // out = c + a · b with c apart from out (a peer's partial sum): c is read, never written; bf16
  // rounds once, after the f32 sum, so it is as close to the f64 answer as one bf16 matmul.
  Generator gen(6);
  const Tensor a = randn({7, 9}, gen, DType::f64), b = randn({9, 4}, gen, DType::f64), c = randn({7, 4}, gen, DType::f64);
  const Tensor want = add(c, naive_matmul(a, b));
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor cd = to_dtype(c, dt), c_before = clone(cd);
    Tensor out = full({7, 4}, 123.0, dt);  // whatever out held is not part of the answer
    addmm_into(out, cd, to_dtype(a, dt), to_dtype(b, dt));
    const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 0.05;
    EXPECT_TRUE(all_close(to_dtype(out, DType::f64), want, tol, tol));
    EXPECT_EQ(to_dtype(cd, DType::f64).to_vector<double>(), to_dtype(c_before, DType::f64).to_vector<double>());
  }
  // An empty inner dimension leaves out = c.
  Tensor out = zeros({7, 4}, DType::f64);
  addmm_into(out, c, zeros({7, 0}, DType::f64), zeros({0, 4}, DType::f64));
  EXPECT_EQ(out.to_vector<double>(), c.to_vector<double>());
}

TEST(Addmm, Errors) {
  Tensor out = zeros({2, 4}), a = zeros({2, 3}), b = zeros({3, 4});
  expect_error([&] { addmm_(out, a, zeros({5, 4})); }, {"addmm_", "[2, 4]", "[2, 3]", "[5, 4]"});
  Tensor t = zeros({4, 2});
  Tensor strided = transpose(t, 0, 1);
  expect_error([&] { addmm_(strided, a, b); }, {"addmm_", "contiguous"});
  Tensor wrong = zeros({2, 4}, DType::f64);
  expect_error([&] { addmm_(wrong, a, b); }, {"addmm_", "dtype"});
  Tensor tracked = zeros({2, 4}).set_requires_grad(true);
  expect_error([&] { addmm_(tracked, a, b); }, {"addmm_", "require grad"});
  Tensor into = zeros({2, 4});
  expect_error([&] { addmm_into(into, zeros({4, 2}), a, b); }, {"addmm_into", "addend", "[4, 2]", "[2, 4]"});
  expect_error([&] { addmm_into(into, zeros({2, 4}, DType::f64), a, b); }, {"addmm_into", "dtype"});
  Tensor wide = zeros({3, 4});
  Tensor overlapping = wide.alias({2, 4}, {4, 1}, 4);  // rows 1-2 of wide; the addend rows 0-1
  Tensor addend = wide.alias({2, 4}, {4, 1}, 0);
  expect_error([&] { addmm_into(overlapping, addend, a, b); }, {"addmm_into", "overlap"});
}

TEST(Matmul, Errors) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  expect_error([&] { matmul(a, b); }, {"matmul", "[2, 3]", "[4, 5]"});
  expect_error([&] { matmul(zeros({2, 3, 4}), zeros({5, 4, 2})); }, {"matmul", "[2, 3, 4]", "[5, 4, 2]", "broadcast"});
  expect_error([&] { matmul(a, zeros({3, 2}, DType::f64)); }, {"matmul", "dtype"});
  expect_error([&] { matmul(zeros({2, 3}, DType::i64), zeros({3, 2}, DType::i64)); }, {"matmul", "floating"});
  expect_error([&] { linear(zeros({2, 3}), zeros({4, 5})); }, {"linear", "[2, 3]", "[4, 5]"});
  expect_error([&] { linear(zeros({2, 5}), zeros({4, 5}), zeros({3})); }, {"linear", "bias", "[3]", "[4, 5]"});
  expect_error([&] { linear(zeros({2, 5}), zeros({20})); }, {"linear", "2-D", "[20]"});
}
