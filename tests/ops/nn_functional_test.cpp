// Neural-network ops (norms, softmax, cross-entropy, dropout, attention, rotary embedding)
// through the op harness against naive f64 loops, plus their specific properties and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "expect_error.h"
#include "op_harness.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

using trireme::testing::expect_error;


// ---- naive references (contiguous f64) ----

Tensor ref_layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps, bool rms) {
  Tensor out = clone(x);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const double* px = x.data<double>();
  double* po = out.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += px[r * d + j] / double(d);
    if (rms) mean = 0;
    for (int64_t j = 0; j < d; ++j) var += (px[r * d + j] - mean) * (px[r * d + j] - mean) / double(d);
    for (int64_t j = 0; j < d; ++j) {
      double y = (px[r * d + j] - mean) / std::sqrt(var + eps);
      if (w) y *= w->data<double>()[j];
      if (b) y += b->data<double>()[j];
      po[r * d + j] = y;
    }
  }
  return out;
}

// softmax along `dim` by explicit index arithmetic over (outer, n, inner).
Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  dim = dim < 0 ? dim + x.dim() : dim;
  Tensor out = clone(x);
  int64_t outer = 1, inner = 1;
  const int64_t n = x.size(dim);
  for (int64_t i = 0; i < dim; ++i) outer *= x.size(i);
  for (int64_t i = dim + 1; i < x.dim(); ++i) inner *= x.size(i);
  const double* px = x.data<double>();
  double* po = out.data<double>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + in; };
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(px[at(j)]);
      for (int64_t j = 0; j < n; ++j) po[at(j)] = log ? px[at(j)] - std::log(s) : std::exp(px[at(j)]) / s;
    }
  }
  return out;
}

Tensor ref_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore, Reduction red) {
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor losses = zeros({n}, DType::f64);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = int64_t(targets.at({r}));
    if (t == ignore) continue;
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(logits.at({r, j}));
    losses.data<double>()[r] = std::log(s) - logits.at({r, t});
    total += losses.data<double>()[r];
    ++count;
  }
  if (red == Reduction::none) return losses;
  return scalar_tensor(red == Reduction::sum ? total : (count ? total / double(count) : 0.0), DType::f64);
}

Tensor ref_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  Tensor out = zeros(q.sizes(), DType::f64);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> p(size_t(tk), 0.0);
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < tk; ++j) {
          if (causal && j > i) continue;
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += q.at({b, h, i, e}) * k.at({b, h, j, e});
          p[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, p[size_t(j)]);
        }
        for (int64_t j = 0; j < tk; ++j) {
          p[size_t(j)] = (causal && j > i) ? 0.0 : std::exp(p[size_t(j)] - mx);
          s += p[size_t(j)];
        }
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t j = 0; j < tk; ++j) o += p[size_t(j)] / s * v.at({b, h, j, e});
          out.data<double>()[((b * nh + h) * tq + i) * hd + e] = o;
        }
      }
  return out;
}

Tensor ref_rope(const Tensor& x, double base, int64_t offset) {
  Tensor out = clone(x);
  const int64_t nb = x.size(0), nh = x.size(1), nt = x.size(2), hd = x.size(3);
  double* po = out.data<double>();
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < nt; ++t)
        for (int64_t i = 0; i < hd / 2; ++i) {
          double theta = double(offset + t) * std::pow(base, -2.0 * double(i) / double(hd));
          double x0 = x.at({b, h, t, 2 * i}), x1 = x.at({b, h, t, 2 * i + 1});
          int64_t at = ((b * nh + h) * nt + t) * hd + 2 * i;
          po[at] = x0 * std::cos(theta) - x1 * std::sin(theta);
          po[at + 1] = x0 * std::sin(theta) + x1 * std::cos(theta);
        }
  return out;
}

Tensor ref_dropout(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset) {
  Tensor out = clone(x);
  double* po = out.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool keep = double(rng_uniform(seed, stream, offset + uint64_t(i))) >= p;
    po[i] = keep ? po[i] / (1.0 - p) : 0.0;
  }
  return out;
}

}  // namespace

// ---- norms ----

TEST(NnFunctional, LayerNorm) {
  check_op({.name = "layer_norm", .shapes = {{3, 7}, {7}, {7}},
            .fn = [](const Inputs& x) { return layer_norm(x[0], x[1], x[2], 1e-5); },
            .reference = [](const Inputs& x) { return ref_layer_norm(x[0], &x[1], &x[2], 1e-5, false); }});
  check_op({.name = "layer_norm_no_affine", .shapes = {{2, 3, 5}},
            .fn = [](const Inputs& x) { return layer_norm(x[0], Tensor(), Tensor(), 1e-5); },
            .reference = [](const Inputs& x) { return ref_layer_norm(x[0], nullptr, nullptr, 1e-5, false); }});
  check_op({.name = "layer_norm_weight_only", .shapes = {{4, 6}, {6}},
            .fn = [](const Inputs& x) { return layer_norm(x[0], x[1], Tensor(), 1e-3); },
            .reference = [](const Inputs& x) { return ref_layer_norm(x[0], &x[1], nullptr, 1e-3, false); }});
}

TEST(NnFunctional, RmsNorm) {
  check_op({.name = "rms_norm", .shapes = {{3, 7}, {7}},
            .fn = [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-6); },
            .reference = [](const Inputs& x) { return ref_layer_norm(x[0], &x[1], nullptr, 1e-6, true); }});
  check_op({.name = "rms_norm_no_weight", .shapes = {{2, 2, 5}},
            .fn = [](const Inputs& x) { return rms_norm(x[0], Tensor(), 1e-6); },
            .reference = [](const Inputs& x) { return ref_layer_norm(x[0], nullptr, nullptr, 1e-6, true); }});
}

TEST(NnFunctional, NormErrors) {
  expect_error([] { layer_norm(zeros({2, 3}), zeros({4}), Tensor()); },
               "layer_norm: weight of shape [4] does not match the last dim of input [2, 3]");
  expect_error([] { rms_norm(zeros({2, 3}), zeros({3}, DType::f64)); }, "rms_norm: weight is f64 but the input is f32");
}

// The weight gradient sums over rows; it must not depend on how many threads split them.
TEST(NnFunctional, NormWeightGradientIndependentOfThreads) {
#ifdef _OPENMP
  Generator gen(5);
  Tensor x = randn({1024, 200}, gen), w = randn({200}, gen), b = randn({200}, gen), g = randn({1024, 200}, gen);
  auto grads = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor wl = clone(w).detach(), bl = clone(b).detach();
    wl.set_requires_grad(true);
    bl.set_requires_grad(true);
    layer_norm(x, wl, bl).backward(g);
    omp_set_num_threads(saved);
    return std::make_pair(wl.grad().to_vector<float>(), bl.grad().to_vector<float>());
  };
  auto one = grads(1), two = grads(2), three = grads(3);
  EXPECT_EQ(one.first, two.first);
  EXPECT_EQ(one.first, three.first);
  EXPECT_EQ(one.second, two.second);
  EXPECT_EQ(one.second, three.second);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

// ---- softmax ----

TEST(NnFunctional, Softmax) {
  check_op({.name = "softmax_last", .shapes = {{4, 7}}, .fn = [](const Inputs& x) { return softmax(x[0], -1); },
            .reference = [](const Inputs& x) { return ref_softmax(x[0], -1, false); }});
  check_op({.name = "softmax_middle", .shapes = {{3, 5, 4}}, .fn = [](const Inputs& x) { return softmax(x[0], 1); },
            .reference = [](const Inputs& x) { return ref_softmax(x[0], 1, false); }});
  check_op({.name = "log_softmax_last", .shapes = {{4, 7}}, .fn = [](const Inputs& x) { return log_softmax(x[0]); },
            .reference = [](const Inputs& x) { return ref_softmax(x[0], -1, true); }});
  check_op({.name = "log_softmax_first", .shapes = {{5, 3}}, .fn = [](const Inputs& x) { return log_softmax(x[0], 0); },
            .reference = [](const Inputs& x) { return ref_softmax(x[0], 0, true); }});
}

TEST(NnFunctional, SoftmaxIsStableForLargeInputs) {
  Tensor x = from_vector<float>({1000.f, 1000.f, -1000.f, 0.f}, {2, 2});
  auto y = softmax(x).to_vector<float>();
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
  EXPECT_FLOAT_EQ(y[2], 0.0f);
  EXPECT_FLOAT_EQ(y[3], 1.0f);
  auto l = log_softmax(x).to_vector<float>();
  EXPECT_NEAR(l[0], -std::log(2.0f), 1e-6);
  EXPECT_NEAR(l[2], -1000.0f, 1e-3);
}

// ---- cross-entropy ----

TEST(NnFunctional, CrossEntropy) {
  auto inputs = [](DType tdt) {
    return [tdt](Generator& g) {
      Tensor logits = random_f64({6, 7}, g, -2, 2);
      Tensor t = to_dtype(from_vector<int64_t>({3, 0, -100, 6, 2, 6}, {6}), tdt);
      return Inputs{logits, t};
    };
  };
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (DType tdt : {DType::i64, DType::i32}) {
      check_op({.name = "cross_entropy_" + std::to_string(int(red)) + "_" + std::string(dtype_name(tdt)),
                .make_inputs = inputs(tdt),
                .fn = [red](const Inputs& x) { return cross_entropy(x[0], x[1], -100, red); },
                .reference = [red](const Inputs& x) { return ref_cross_entropy(x[0], x[1], -100, red); }});
    }
  }
  // A custom ignore_index.
  check_op({.name = "cross_entropy_ignore_2",
            .make_inputs = [](Generator& g) { return Inputs{random_f64({4, 5}, g), from_vector<int64_t>({2, 1, 2, 4}, {4})}; },
            .fn = [](const Inputs& x) { return cross_entropy(x[0], x[1], 2); },
            .reference = [](const Inputs& x) { return ref_cross_entropy(x[0], x[1], 2, Reduction::mean); }});
}

TEST(NnFunctional, CrossEntropyAllIgnoredIsZero) {
  Tensor logits = zeros({3, 4}).detach();
  logits.set_requires_grad(true);
  Tensor t = from_vector<int64_t>({-100, -100, -100}, {3});
  Tensor loss = cross_entropy(logits, t);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  for (float g : logits.grad().to_vector<float>()) EXPECT_EQ(g, 0.0f);
}

TEST(NnFunctional, CrossEntropyErrors) {
  Tensor logits = zeros({4, 5});
  expect_error([&] { cross_entropy(logits, from_vector<int64_t>({0, 1, 9, 2}, {4})); },
               "cross_entropy: target 9 at row 2 is out of range for 5 classes");
  expect_error([&] { cross_entropy(logits, from_vector<int32_t>({0, -1, 1, 2}, {4})); },
               "cross_entropy: target -1 at row 1 is out of range for 5 classes");
  expect_error([&] { cross_entropy(logits, from_vector<int64_t>({0, 1, 2}, {3})); },
               "cross_entropy: targets of shape [3] do not match logits [4, 5]");
  expect_error([&] { cross_entropy(logits, zeros({4})); }, "cross_entropy: targets must be i64 or i32, got f32");
}

TEST(NnFunctional, CrossEntropyLargeMatchesLogSoftmax) {
  // The GPT shape class (many classes) against log_softmax + a gather by hand.
  Generator gen(3);
  Tensor logits = mul(randn({64, 6144}, gen), 3.0);
  std::vector<int64_t> tv(64);
  for (int64_t i = 0; i < 64; ++i) tv[size_t(i)] = (i * 977) % 6144;
  Tensor ls = log_softmax(logits);
  double expected = 0;
  for (int64_t i = 0; i < 64; ++i) expected -= ls.at({i, tv[size_t(i)]}) / 64.0;
  EXPECT_NEAR(cross_entropy(logits, from_vector<int64_t>(tv, {64})).item(), expected, 1e-4);
}

// ---- dropout ----

TEST(NnFunctional, DropoutGradientWithFixedMask) {
  check_op({.name = "dropout", .shapes = {{3, 7}},
            .fn = [](const Inputs& x) { return dropout(x[0], 0.3, true, 7, 3, 5); },
            .reference = [](const Inputs& x) { return ref_dropout(x[0], 0.3, 7, 3, 5); }});
}

TEST(NnFunctional, DropoutKeepsAndScales) {
  const double p = 0.3;
  Tensor x = ones({200000});
  auto y = dropout(x, p, true, 42, 1, 0).to_vector<float>();
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(v, float(1.0 / (1.0 - p)));
    }
  }
  EXPECT_NEAR(double(kept) / double(y.size()), 1.0 - p, 0.005);
}

TEST(NnFunctional, DropoutIsReproducibleAndSliceable) {
  Generator gen(1);
  Tensor x = randn({10, 6}, gen);
  Tensor a = dropout(x, 0.5, true, 9, 2, 100);
  EXPECT_EQ(a.to_vector<float>(), dropout(x, 0.5, true, 9, 2, 100).to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), dropout(x, 0.5, true, 10, 2, 100).to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), dropout(x, 0.5, true, 9, 3, 100).to_vector<float>());
  // Rows [3, 7) with offset 100 + 3 * 6 reproduce their part of the whole tensor's mask.
  Tensor part = dropout(slice(x, 0, 3, 7), 0.5, true, 9, 2, 100 + 3 * 6);
  EXPECT_EQ(part.to_vector<float>(), slice(a, 0, 3, 7).to_vector<float>());
  // Also for a non-contiguous slice (columns): element order is x's row-major order.
  Tensor cols = slice(x, 1, 2, 4);
  Tensor dc = dropout(cols, 0.5, true, 9, 2, 0);
  Tensor expected = ref_dropout(to_dtype(contiguous(cols), DType::f64), 0.5, 9, 2, 0);
  EXPECT_TRUE(all_close(dc, expected, 1e-6, 1e-6));
}

// The kernel's mask is rng_uniform's, also where the counter carries into its high 32 bits and
// for seeds and streams wider than 32 bits.
TEST(NnFunctional, DropoutMaskIsRngUniform) {
  Tensor x = ones({1000}, DType::f64);
  const uint64_t seed = 0x123456789abcdefull, stream = 0xfedcba987654321ull, offset = (uint64_t(1) << 32) - 500;
  for (double p : {0.1, 0.5, 0.77}) {
    EXPECT_EQ(dropout(x, p, true, seed, stream, offset).to_vector<double>(),
              ref_dropout(x, p, seed, stream, offset).to_vector<double>()) << "p=" << p;
  }
}

TEST(NnFunctional, DropoutEvalAndZeroAreIdentity) {
  Generator gen(1);
  Tensor x = randn({4, 5}, gen);
  EXPECT_TRUE(dropout(x, 0.5, false, 1, 2, 3).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, 1, 2, 3).same(x));
  Generator g2(7);
  EXPECT_TRUE(dropout(x, 0.5, false, g2).same(x));
  EXPECT_EQ(g2.offset(), 0u);
}

TEST(NnFunctional, DropoutGeneratorReservesCounters) {
  Generator gen(1);
  Tensor x = randn({4, 5}, gen);
  Generator g(11, 4);
  Tensor a = dropout(x, 0.4, true, g);
  EXPECT_EQ(g.offset(), 20u);
  Tensor b = dropout(x, 0.4, true, g);
  EXPECT_EQ(g.offset(), 40u);
  EXPECT_EQ(a.to_vector<float>(), dropout(x, 0.4, true, 11, 4, 0).to_vector<float>());
  EXPECT_EQ(b.to_vector<float>(), dropout(x, 0.4, true, 11, 4, 20).to_vector<float>());
}

TEST(NnFunctional, DropoutErrors) {
  expect_error([] { dropout(zeros({2}), 1.0, true, 1, 1); }, "dropout: p must be in [0, 1), got 1");
  expect_error([] { dropout(zeros({2}), -0.1, true, 1, 1); }, "dropout: p must be in [0, 1), got -0.1");
}

// ---- attention ----

TEST(NnFunctional, Attention) {
  check_op({.name = "attention_causal", .shapes = {{2, 2, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}},
            .fn = [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); },
            .reference = [](const Inputs& x) { return ref_attention(x[0], x[1], x[2], true); }});
  check_op({.name = "attention_full_cross", .shapes = {{1, 3, 5, 6}, {1, 3, 3, 6}, {1, 3, 3, 6}},
            .fn = [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); },
            .reference = [](const Inputs& x) { return ref_attention(x[0], x[1], x[2], false); }});
}

TEST(NnFunctional, AttentionFromHeadViews) {
  // q, k, v as head views of a fused (B, T, 3, H, hd) projection: the layout a model produces.
  Generator gen(4);
  const int64_t B = 2, T = 6, H = 3, hd = 4;
  Tensor qkv = randn({B, T, 3, H, hd}, gen, DType::f64);
  auto head = [&](int64_t i) { return transpose(squeeze(slice(qkv, 2, i, i + 1), 2), 1, 2); };
  Tensor q = head(0), k = head(1), v = head(2);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  EXPECT_TRUE(all_close(out, ref_attention(contiguous(q), contiguous(k), contiguous(v), true), 1e-12, 1e-10));
}

TEST(NnFunctional, AttentionIsCausal) {
  Generator gen(2);
  const int64_t T = 7;
  Tensor q = randn({1, 2, T, 8}, gen), k = randn({1, 2, T, 8}, gen), v = randn({1, 2, T, 8}, gen);
  Tensor base = scaled_dot_product_attention(q, k, v, true);
  for (int64_t t = 0; t + 1 < T; ++t) {
    // Change every input after position t: outputs up to t must not move.
    Tensor q2 = clone(q), k2 = clone(k), v2 = clone(v);
    for (Tensor* x : {&q2, &k2, &v2}) {
      Tensor tail = slice(*x, 2, t + 1, T);
      Tensor noise = randn(tail.sizes(), gen);
      NoGradGuard ng;
      copy_(tail, noise);
    }
    Tensor moved = scaled_dot_product_attention(q2, k2, v2, true);
    EXPECT_EQ(slice(moved, 2, 0, t + 1).to_vector<float>(), slice(base, 2, 0, t + 1).to_vector<float>()) << "t=" << t;
    EXPECT_NE(slice(moved, 2, t + 1, T).to_vector<float>(), slice(base, 2, t + 1, T).to_vector<float>());
  }
}

TEST(NnFunctional, AttentionErrors) {
  Tensor q = zeros({2, 3, 5, 4});
  expect_error([&] { scaled_dot_product_attention(q, zeros({2, 3, 5, 8}), zeros({2, 3, 5, 8})); },
               "must agree on batch, heads and head dim");
  expect_error([&] { scaled_dot_product_attention(q, zeros({2, 3, 6, 4}), zeros({2, 3, 5, 4}), false); },
               "have different lengths");
  expect_error([&] { scaled_dot_product_attention(q, zeros({2, 3, 6, 4}), zeros({2, 3, 6, 4}), true); },
               "causal attention needs as many queries as keys");
  expect_error([&] { scaled_dot_product_attention(zeros({3, 5, 4}), q, q); }, "must be (B, H, T, hd)");
}

// ---- rotary embedding ----

TEST(NnFunctional, RotaryEmbedding) {
  check_op({.name = "rope", .shapes = {{2, 3, 5, 6}},
            .fn = [](const Inputs& x) { return rotary_embedding(x[0], 10000.0, 0); },
            .reference = [](const Inputs& x) { return ref_rope(x[0], 10000.0, 0); }});
  check_op({.name = "rope_offset", .shapes = {{1, 2, 5, 4}},
            .fn = [](const Inputs& x) { return rotary_embedding(x[0], 500.0, 7); },
            .reference = [](const Inputs& x) { return ref_rope(x[0], 500.0, 7); }});
}

TEST(NnFunctional, RotaryEmbeddingPreservesPairNorms) {
  Generator gen(8);
  Tensor x = randn({2, 2, 9, 8}, gen, DType::f64);
  Tensor y = rotary_embedding(x, 10000.0, 3);
  auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < xv.size(); i += 2) {
    EXPECT_NEAR(std::hypot(xv[i], xv[i + 1]), std::hypot(yv[i], yv[i + 1]), 1e-12);
  }
  // Position 0 is not rotated.
  EXPECT_EQ(slice(rotary_embedding(x, 10000.0, 0), 2, 0, 1).to_vector<double>(), slice(x, 2, 0, 1).to_vector<double>());
  expect_error([] { rotary_embedding(zeros({1, 1, 2, 5})); }, "rotary_embedding: the head dim must be even");
}
