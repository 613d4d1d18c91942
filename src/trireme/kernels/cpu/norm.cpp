// CPU layer norm and RMS norm, forward and backward, over the last dim of a contiguous (R, D) x.
// Rows run in parallel. Row statistics accumulate in double (vectorised with omp simd; D is small
// next to the GEMMs around a norm, so the wider type costs little and keeps f32 statistics exact).
// grad_weight/grad_bias sum over rows; they are computed by a column-blocked pass in which each
// column is summed by one thread in row order, so the result does not depend on the thread count.
// An f32 norm's y (forward) or grad (backward) may be bf16/f16 (kernels/nn.h: the edge type E); a
// forward may add a residual to x first and write the sum, and a backward may add an addend to grad_x
// and write a 16-bit copy of it (static graphs fold a residual stream's adds and casts into them).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Columns per block of the weight-gradient pass: wide enough for vector loads along a row,
// small enough that every thread gets blocks when D is a few hundred.
constexpr int64_t kColumnBlock = 64;

// Converts an optional (D) parameter to acc_t values, or fills `fill` when it is undefined.
template <class T>
std::vector<acc_t<T>> param_or(const Tensor& p, int64_t d, acc_t<T> fill) {
  std::vector<acc_t<T>> out(size_t(d), fill);
  if (p.defined()) {
    const T* src = p.data<T>();
    for (int64_t j = 0; j < d; ++j) out[size_t(j)] = acc_t<T>(src[j]);
  }
  return out;
}

// The row the norm reads: x's, or x plus the residual R written to the sum's row, as the add
// kernel adds a value of T and one widened from R (kernels/nn.h).
template <class T, class R>
const T* input_row(const T* px, const R* pres, T* psum, int64_t r, int64_t d) {
  const T* xr = px + r * d;
  if (!pres) return xr;
  using A = acc_t<T>;
  const R* rr = pres + r * d;
  T* sr = psum + r * d;
  for (int64_t j = 0; j < d; ++j) sr[j] = T(A(xr[j]) + A(T(rr[j])));
  return sr;
}

// The residual's and the sum's pointers (null without a residual); the sum must be x's shape.
template <class T, class R>
std::pair<const R*, T*> residual_ptrs(const char* op, const Tensor& x, const Tensor& residual, Tensor& sum) {
  check_norm_residual(op, x, residual, sum);
  if (!residual.defined()) return {nullptr, nullptr};
  return {residual.data<R>(), sum.data<T>()};
}

template <class T, class E, class R>
void layer_norm_cpu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& y, Tensor& sum, Tensor& mean, Tensor& rstd) {
  using A = acc_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const T* px = x.data<T>();
  const auto [pres, psum] = residual_ptrs<T, R>("layer_norm", x, residual, sum);
  E* py = y.data<E>();
  A* pm = mean.data<A>();
  A* pr = rstd.data<A>();
  const auto w = param_or<T>(weight, d, A(1));
  const auto b = param_or<T>(bias, d, A(0));
  parallel_for(rows, 4 * d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = input_row(px, pres, psum, r, d);
      // Two passes over a row that sits in L1: the mean, then the centred second moment
      // (no cancellation, unlike E[x²] - E[x]² in one pass).
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < d; ++j) s += double(A(xr[j]));
      const double mu = s / double(d);
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < d; ++j) {
        double c = double(A(xr[j])) - mu;
        ss += c * c;
      }
      const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
      pm[r] = A(mu);
      pr[r] = A(inv);
      const A m = A(mu), ri = A(inv);
      E* yr = py + r * d;
      for (int64_t j = 0; j < d; ++j) yr[j] = E((A(xr[j]) - m) * ri * w[size_t(j)] + b[size_t(j)]);
    }
  });
}

// grad_weight[j] = Σ_r g[r, j] * xhat[r, j] and grad_bias[j] = Σ_r g[r, j], where
// xhat[r, j] = (x[r, j] - mean[r]) * rstd[r] (mean = null for RMS norm: xhat = x * rstd).
template <class T, class E>
void param_grads(const E* pg, const T* px, const acc_t<T>* pm, const acc_t<T>* pr, int64_t rows, int64_t d,
                 Tensor& grad_weight, Tensor& grad_bias) {
  using A = acc_t<T>;
  const bool want_w = grad_weight.defined(), want_b = grad_bias.defined();
  if (!want_w && !want_b) return;
  T* gw = want_w ? grad_weight.data<T>() : nullptr;
  T* gb = want_b ? grad_bias.data<T>() : nullptr;
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, rows * kColumnBlock, [&](int64_t b0, int64_t b1) {
    std::vector<A> acc_w(static_cast<size_t>(kColumnBlock)), acc_b(static_cast<size_t>(kColumnBlock));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t c0 = blk * kColumnBlock, n = std::min(kColumnBlock, d - c0);
      std::fill(acc_w.begin(), acc_w.end(), A(0));
      std::fill(acc_b.begin(), acc_b.end(), A(0));
      for (int64_t r = 0; r < rows; ++r) {
        const E* gr = pg + r * d + c0;
        const T* xr = px + r * d + c0;
        const A m = pm ? pm[r] : A(0), ri = pr[r];
        for (int64_t j = 0; j < n; ++j) {
          A g = A(gr[j]);
          acc_w[size_t(j)] += g * ((A(xr[j]) - m) * ri);
          acc_b[size_t(j)] += g;
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        if (gw) gw[c0 + j] = T(acc_w[size_t(j)]);
        if (gb) gb[c0 + j] = T(acc_b[size_t(j)]);
      }
    }
  });
}

// out[j] += addend[j] over a row of grad_x, as the add kernel adds two values of T (kernels/nn.h).
template <class T>
void add_row(T* out, const T* addend, int64_t d) {
  using A = acc_t<T>;
  for (int64_t j = 0; j < d; ++j) out[j] = T(A(out[j]) + A(addend[j]));
}

// edge[j] = a row of grad_x rounded to the edge dtype E, as the cast kernel rounds it (kernels/nn.h).
template <class T, class E>
void round_row(E* edge, const T* out, int64_t d) {
  for (int64_t j = 0; j < d; ++j) edge[j] = E(acc_t<T>(out[j]));
}

// The backward's 16-bit copy of grad_x: of grad's edge dtype E, beside an f32 x only.
template <class T, class E>
E* edge_ptr(const char* op, const Tensor& grad_x_edge) {
  if (!grad_x_edge.defined()) return nullptr;
  constexpr bool sixteen_bit_edge = !std::is_same_v<T, E>;
  TRIREME_CHECK(sixteen_bit_edge && grad_x_edge.dtype() == dtype_v<E>, op, ": grad_x_edge must have grad's ",
                "16-bit edge dtype beside an f32 x, got ", grad_x_edge.dtype());
  return grad_x_edge.data<E>();
}

// With xhat = (x - mean) * rstd and gy = grad * w:
//   grad_x = rstd * (gy - mean_j(gy) - xhat * mean_j(gy * xhat)).
template <class T, class E>
void layer_norm_backward_cpu(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge,
                             Tensor& grad_weight, Tensor& grad_bias) {
  using A = acc_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const E* pg = grad.data<E>();
  const T* px = x.data<T>();
  const A* pm = mean.data<A>();
  const A* pr = rstd.data<A>();
  const auto w = param_or<T>(weight, d, A(1));
  if (grad_x.defined()) {
    T* pgx = grad_x.data<T>();
    const T* pa = addend.defined() ? addend.data<T>() : nullptr;
    E* pe = edge_ptr<T, E>("layer_norm_backward", grad_x_edge);
    parallel_for(rows, 6 * d, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const E* gr = pg + r * d;
        const T* xr = px + r * d;
        const A m = pm[r], ri = pr[r];
        double s_gy = 0, s_gyx = 0;
#pragma omp simd reduction(+ : s_gy, s_gyx)
        for (int64_t j = 0; j < d; ++j) {
          A gy = A(gr[j]) * w[size_t(j)];
          s_gy += double(gy);
          s_gyx += double(gy * ((A(xr[j]) - m) * ri));
        }
        const A a = A(s_gy / double(d)), c = A(s_gyx / double(d));
        T* out = pgx + r * d;
        for (int64_t j = 0; j < d; ++j) {
          A xhat = (A(xr[j]) - m) * ri;
          out[j] = T(ri * (A(gr[j]) * w[size_t(j)] - a - xhat * c));
        }
        if (pa) add_row(out, pa + r * d, d);
        if (pe) round_row(pe + r * d, out, d);
      }
    });
  }
  param_grads<T, E>(pg, px, pm, pr, rows, d, grad_weight, grad_bias);
}

template <class T, class E, class R>
void rms_norm_cpu(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, Tensor& y, Tensor& sum,
                  Tensor& rstd) {
  using A = acc_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const T* px = x.data<T>();
  const auto [pres, psum] = residual_ptrs<T, R>("rms_norm", x, residual, sum);
  E* py = y.data<E>();
  A* pr = rstd.data<A>();
  const auto w = param_or<T>(weight, d, A(1));
  parallel_for(rows, 3 * d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = input_row(px, pres, psum, r, d);
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < d; ++j) {
        double v = double(A(xr[j]));
        ss += v * v;
      }
      const A ri = A(1.0 / std::sqrt(ss / double(d) + eps));
      pr[r] = ri;
      E* yr = py + r * d;
      for (int64_t j = 0; j < d; ++j) yr[j] = E(A(xr[j]) * ri * w[size_t(j)]);
    }
  });
}

// With xhat = x * rstd and gy = grad * w:  grad_x = rstd * (gy - xhat * mean_j(gy * xhat)).
template <class T, class E>
void rms_norm_backward_cpu(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge, Tensor& grad_weight) {
  using A = acc_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const E* pg = grad.data<E>();
  const T* px = x.data<T>();
  const A* pr = rstd.data<A>();
  const auto w = param_or<T>(weight, d, A(1));
  if (grad_x.defined()) {
    T* pgx = grad_x.data<T>();
    const T* pa = addend.defined() ? addend.data<T>() : nullptr;
    E* pe = edge_ptr<T, E>("rms_norm_backward", grad_x_edge);
    parallel_for(rows, 5 * d, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const E* gr = pg + r * d;
        const T* xr = px + r * d;
        const A ri = pr[r];
        double s_gyx = 0;
#pragma omp simd reduction(+ : s_gyx)
        for (int64_t j = 0; j < d; ++j) s_gyx += double(A(gr[j]) * w[size_t(j)] * (A(xr[j]) * ri));
        const A c = A(s_gyx / double(d));
        T* out = pgx + r * d;
        for (int64_t j = 0; j < d; ++j) out[j] = T(ri * (A(gr[j]) * w[size_t(j)] - A(xr[j]) * ri * c));
        if (pa) add_row(out, pa + r * d, d);
        if (pe) round_row(pe + r * d, out, d);
      }
    });
  }
  Tensor no_bias;
  param_grads<T, E>(pg, px, nullptr, pr, rows, d, grad_weight, no_bias);
}

// The registered kernels: the edge type picked at the call.
template <class T>
void layer_norm_any(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& y, Tensor& sum, Tensor& mean, Tensor& rstd) {
  dispatch_norm_edge<T>("layer_norm", y.dtype(), [&]<class E>() {
    dispatch_norm_residual<T, E>("layer_norm", residual, [&]<class R>() {
      layer_norm_cpu<T, E, R>(x, residual, weight, bias, eps, y, sum, mean, rstd);
    });
  });
}
template <class T>
void layer_norm_backward_any(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge,
                             Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_norm_edge<T>("layer_norm_backward", grad.dtype(), [&]<class E>() {
    layer_norm_backward_cpu<T, E>(grad, x, weight, mean, rstd, addend, grad_x, grad_x_edge, grad_weight, grad_bias);
  });
}
template <class T>
void rms_norm_any(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, Tensor& y, Tensor& sum,
                  Tensor& rstd) {
  dispatch_norm_edge<T>("rms_norm", y.dtype(), [&]<class E>() {
    dispatch_norm_residual<T, E>("rms_norm", residual,
                                 [&]<class R>() { rms_norm_cpu<T, E, R>(x, residual, weight, eps, y, sum, rstd); });
  });
}
template <class T>
void rms_norm_backward_any(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge, Tensor& grad_weight) {
  dispatch_norm_edge<T>("rms_norm_backward", grad.dtype(), [&]<class E>() {
    rms_norm_backward_cpu<T, E>(grad, x, weight, rstd, addend, grad_x, grad_x_edge, grad_weight);
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_norm) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<LayerNormKernel, double, float, bf16_t, f16_t>(
      "layer_norm", cpu, []<class T>() { return &layer_norm_any<T>; });
  registry.add_each<LayerNormBackwardKernel, double, float, bf16_t, f16_t>(
      "layer_norm_backward", cpu, []<class T>() { return &layer_norm_backward_any<T>; });
  registry.add_each<RmsNormKernel, double, float, bf16_t, f16_t>(
      "rms_norm", cpu, []<class T>() { return &rms_norm_any<T>; });
  registry.add_each<RmsNormBackwardKernel, double, float, bf16_t, f16_t>(
      "rms_norm_backward", cpu, []<class T>() { return &rms_norm_backward_any<T>; });
}

}  // namespace trireme::cpu
