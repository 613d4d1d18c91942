// The fused CPU attention kernels beyond nn_functional_test's basic cases: shapes that span
// several query tiles (odd lengths, ragged last tile), Tq != Tk without a mask, head views of a
// fused QKV projection, the saved log-sum-exps, and rows with no key at all.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "op_harness.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/kernels/varying_shapes.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

// Attention with loops in f64 on contiguous (B, H, T, hd) inputs; lse (B, H, Tq) when given.
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor* lse = nullptr) {
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  Tensor out = zeros(q.sizes(), DType::f64);
  if (lse) *lse = zeros({nb, nh, tq}, DType::f64);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t n = causal ? std::min(i + 1, tk) : tk;
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += q.at({b, h, i, e}) * k.at({b, h, j, e});
          s[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t j = 0; j < n; ++j) o += s[size_t(j)] / sum * v.at({b, h, j, e});
          out.data<double>()[((b * nh + h) * tq + i) * hd + e] = n ? o : 0.0;
        }
        if (lse) lse->data<double>()[(b * nh + h) * tq + i] = n ? mx + std::log(sum) : -INFINITY;
      }
  return out;
}

OpCase attention_case(std::string name, Shape qs, Shape ks, bool causal) {
  return {.name = std::move(name),
          .shapes = {qs, ks, ks},
          .fn = [=](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
          .reference = [=](const Inputs& x) { return naive_attention(x[0], x[1], x[2], causal); }};
}

TEST(Attention, SeveralQueryTiles) {
  // 67 and 130 rows: two and three query tiles, the last ragged.
  check_op(attention_case("attention_causal_odd_t", {1, 2, 67, 3}, {1, 2, 67, 3}, true));
  check_op(attention_case("attention_full_odd_t", {1, 1, 67, 5}, {1, 1, 67, 5}, false));
  check_op(attention_case("attention_causal_t130", {1, 1, 130, 2}, {1, 1, 130, 2}, true));
}

TEST(Attention, CrossLengths) {
  check_op(attention_case("attention_more_queries", {2, 1, 70, 4}, {2, 1, 9, 4}, false));
  check_op(attention_case("attention_more_keys", {1, 2, 3, 4}, {1, 2, 80, 4}, false));
  check_op(attention_case("attention_one_query", {1, 1, 1, 8}, {1, 1, 7, 8}, false));
  check_op(attention_case("attention_t1_causal", {2, 2, 1, 8}, {2, 2, 1, 8}, true));
}

TEST(Attention, FusedProjectionViews) {
  // q, k, v as head views of one (B, T, 3·H·hd) projection output, with gradients through them.
  const int64_t B = 2, T = 66, H = 2, hd = 3;
  check_op({.name = "attention_fused_qkv",
            .shapes = {{B, T, 3 * H * hd}},
            .fn = [=](const Inputs& x) {
              auto head = [&](int64_t w) { return transpose(reshape(narrow(x[0], 2, w * H * hd, H * hd), {B, T, H, hd}), 1, 2); };
              return scaled_dot_product_attention(head(0), head(1), head(2), true);
            },
            .reference = [=](const Inputs& x) {
              auto head = [&](int64_t w) {
                return contiguous(transpose(reshape(narrow(x[0], 2, w * H * hd, H * hd), {B, T, H, hd}), 1, 2));
              };
              return naive_attention(head(0), head(1), head(2), true);
            }});
}

TEST(Attention, FusedProjectionSplitAsTheModelDoes) {
  // The model's path: one split of the projection (ops/view.cpp), whose backward takes dq, dk, dv
  // in place when the attention backward wrote them into one fused buffer (ops/attention.cpp).
  const int64_t B = 2, T = 9, H = 3, hd = 4;
  check_op({.name = "attention_split_qkv",
            .shapes = {{B, T, 3 * H * hd}},
            .fn = [=](const Inputs& x) {
              std::vector<Tensor> p = split(x[0], H * hd, 2);
              auto head = [&](int64_t w) { return transpose(view(p[size_t(w)], {B, T, H, hd}), 1, 2); };
              return scaled_dot_product_attention(head(0), head(1), head(2), true);
            },
            .reference = [=](const Inputs& x) {
              auto head = [&](int64_t w) {
                return contiguous(transpose(reshape(narrow(x[0], 2, w * H * hd, H * hd), {B, T, H, hd}), 1, 2));
              };
              return naive_attention(head(0), head(1), head(2), true);
            }});
}

TEST(Attention, KernelLogSumExp) {
  // The saved statistic itself, straight from the kernel, each float dtype and both masks.
  Generator gen(7);
  for (bool causal : {true, false}) {
    for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (causal ? " causal" : " full"));
      Tensor q = randn({2, 3, 70, 8}, gen, DType::f64), k = randn({2, 3, 70, 8}, gen, DType::f64),
             v = randn({2, 3, 70, 8}, gen, DType::f64);
      Tensor ql = to_dtype(q, dt), kl = to_dtype(k, dt), vl = to_dtype(v, dt);
      Tensor lse_ref;
      Tensor out_ref = naive_attention(to_dtype(ql, DType::f64), to_dtype(kl, DType::f64), to_dtype(vl, DType::f64),
                                       causal, &lse_ref);
      Tensor out = Tensor::empty(q.sizes(), dt), lse = Tensor::empty({2, 3, 70}, stat_dtype(dt));
      find_kernel<AttentionKernel>("scaled_dot_product_attention", Device::cpu(), dt)(ql, kl, vl, causal, out, lse);
      const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 1e-2;
      EXPECT_TRUE(all_close(to_dtype(lse, DType::f64), lse_ref, tol, tol));
      EXPECT_TRUE(all_close(to_dtype(out, DType::f64), out_ref, tol, tol));
    }
  }
}

TEST(Attention, NoKeys) {
  // Tk = 0 (non-causal): zero output, lse -inf, zero gradients.
  Generator gen(1);
  Tensor q = randn({1, 2, 3, 4}, gen), k = zeros({1, 2, 0, 4}), v = zeros({1, 2, 0, 4});
  Tensor out = Tensor::empty(q.sizes(), DType::f32), lse = Tensor::empty({1, 2, 3}, DType::f32);
  find_kernel<AttentionKernel>("scaled_dot_product_attention", Device::cpu(), DType::f32)(q, k, v, false, out, lse);
  for (float x : out.to_vector<float>()) EXPECT_EQ(x, 0.0f);
  for (float x : lse.to_vector<float>()) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  q.set_requires_grad(true);
  sum(scaled_dot_product_attention(q, k, v, false)).backward();
  for (float x : q.grad().to_vector<float>()) EXPECT_EQ(x, 0.0f);
}

// Eager generation marks its calls so that the CUDA attention builds no cuDNN plan per length;
// the mark nests and belongs to its thread (pipeline stages run on threads of their own).
TEST(VaryingShapes, ScopesNestAndStayOnTheirThread) {
  EXPECT_FALSE(kernels::shapes_vary());
  {
    kernels::VaryingShapes outer;
    {
      kernels::VaryingShapes inner;
      EXPECT_TRUE(kernels::shapes_vary());
    }
    EXPECT_TRUE(kernels::shapes_vary());
    bool other_thread = true;
    std::thread([&] { other_thread = kernels::shapes_vary(); }).join();
    EXPECT_FALSE(other_thread);
  }
  EXPECT_FALSE(kernels::shapes_vary());
}

}  // namespace
