// CPU softmax and log_softmax over the last dim of a contiguous (R, D) tensor, and their
// backwards. Stable: each row is shifted by its max before exp. Rows run in parallel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/vec_math.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T, bool Log>
void softmax_cpu(const Tensor& x, Tensor& y) {
  using A = acc_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  parallel_for(rows, 8 * d, [&](int64_t r0, int64_t r1) {
    std::vector<A> e(static_cast<size_t>(d));  // exp(x - max) of one row, in the wide type
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = px + r * d;
      T* yr = py + r * d;
      A m = row_max<A>(xr, d);
      // An all -inf row (everything masked) would give -inf - -inf = NaN; shift by 0 instead,
      // so the row comes out as NaN only through 0/0 like the mathematical definition.
      if (std::isinf(m) && m < 0) m = A(0);
      for (int64_t j = 0; j < d; ++j) e[size_t(j)] = exp_acc(A(xr[j]) - m);
      const double s = row_sum(e.data(), d);
      if constexpr (Log) {
        // (x - m) - log s, not x - (m + log s): m + log s would round to the ulp of m.
        const A log_s = A(std::log(s));
        for (int64_t j = 0; j < d; ++j) yr[j] = T((A(xr[j]) - m) - log_s);
      } else {
        const A inv = A(1.0 / s);
        for (int64_t j = 0; j < d; ++j) yr[j] = T(e[size_t(j)] * inv);
      }
    }
  });
}

// softmax:     grad_x = y * (g - Σ g y)
// log_softmax: grad_x = g - exp(y) * Σ g
template <class T, bool Log>
void softmax_backward_cpu(const Tensor& grad, const Tensor& y, Tensor& grad_x) {
  using A = acc_t<T>;
  const int64_t d = y.size(-1), rows = d ? y.numel() / d : 0;
  const T* pg = grad.data<T>();
  const T* py = y.data<T>();
  T* pgx = grad_x.data<T>();
  parallel_for(rows, 6 * d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* gr = pg + r * d;
      const T* yr = py + r * d;
      T* out = pgx + r * d;
      double s = 0;
      if constexpr (Log) {
        for (int64_t j = 0; j < d; ++j) s += double(A(gr[j]));
        const A sa = A(s);
        for (int64_t j = 0; j < d; ++j) out[j] = T(A(gr[j]) - exp_acc(A(yr[j])) * sa);
      } else {
        for (int64_t j = 0; j < d; ++j) s += double(A(gr[j]) * A(yr[j]));
        const A sa = A(s);
        for (int64_t j = 0; j < d; ++j) out[j] = T(A(yr[j]) * (A(gr[j]) - sa));
      }
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_softmax) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<SoftmaxKernel, double, float, bf16_t, f16_t>(
      "softmax", cpu, []<class T>() { return &softmax_cpu<T, false>; });
  registry.add_each<SoftmaxKernel, double, float, bf16_t, f16_t>(
      "log_softmax", cpu, []<class T>() { return &softmax_cpu<T, true>; });
  registry.add_each<SoftmaxBackwardKernel, double, float, bf16_t, f16_t>(
      "softmax_backward", cpu, []<class T>() { return &softmax_backward_cpu<T, false>; });
  registry.add_each<SoftmaxBackwardKernel, double, float, bf16_t, f16_t>(
      "log_softmax_backward", cpu, []<class T>() { return &softmax_backward_cpu<T, true>; });
}

}  // namespace trireme::cpu
