// What the process-less parallel tests share: token batches over a 61-token vocabulary, and the
// largest elementwise difference of two tensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

namespace trireme::parallel::testing {

// (B, T) token ids in [0, 61), different for each salt.
inline Tensor tokens(int64_t B, int64_t T, int64_t salt) {
  std::vector<int64_t> v(size_t(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 29 + size_t(salt) * 13 + 1) % 61);
  return from_vector(v, {B, T});
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace trireme::parallel::testing
