// Vectorisable math for CPU kernels: exp (softmax, cross-entropy and attention spend most of
// their time in exp, and glibc's expf is a scalar call) and row max/sum reductions.
//
//   for (int64_t j = 0; j < n; ++j) y[j] = cpu::exp_acc(x[j] - max);  // vectorised for float
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace trireme::cpu {

// e^x in float, relative error below 2e-7 (a few ulp); 0 below -86.9 (where e^x < 2e-38, the
// bottom of the normal range) and inf above 88.7;
// NaN stays NaN. Branch-free and always inlined, so that loops over it vectorise (an out-of-line
// call per element keeps a loop scalar).
// Method: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2; e^r by its Taylor
// polynomial of degree 7 (truncation error r^8/8! < 1e-9); 2^n built in the exponent bits.
[[gnu::always_inline]] inline float exp_fast(float x) {
  const float lo = -86.9f, hi = 88.7f;
  float xc = x < lo ? lo : (x > hi ? hi : x);  // NaN passes through: both comparisons are false
  // Adding 1.5 * 2^23 rounds x/ln2 to an integer held in the low mantissa bits (no float->int UB).
  const float magic = 12582912.0f;
  float t = xc * 1.44269504088896341f + magic;
  float n = t - magic;
  // Two-part ln2 so that r carries no rounding error from n * ln2.
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n in [-125, 128]: 2^n = 2^(n-1) * 2, where 2^(n-1) = bits (n - 1 + 127) << 23 is a normal
  // float (2^128 itself is not representable, yet e^88.7 = p * 2^128 with p < 1 is).
  uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(magic);  // n mod 2^32
  float scale = std::bit_cast<float>((ni + 126u) << 23);                       // 2^(n-1)
  float y = p * scale * 2.0f;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return y;
}

// exp in the accumulation type: the fast float version, std::exp for double.
[[gnu::always_inline]] inline float exp_acc(float x) { return exp_fast(x); }
[[gnu::always_inline]] inline double exp_acc(double x) { return std::exp(x); }

// Row max. NaN is skipped here, but it still reaches the result through exp(NaN - max).
template <class A, class T>
inline A row_max(const T* x, int64_t d) {
  A m = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < d; ++j) m = std::max(m, A(x[j]));
  return m;
}

// Σ e[j] in double, vectorised (omp simd allows the reassociation plain loops may not do).
template <class A>
inline double row_sum(const A* e, int64_t d) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < d; ++j) s += double(e[j]);
  return s;
}

}  // namespace trireme::cpu
