// Helpers of the CUDA tests: skipping without a usable GPU, and comparing a CUDA result with
// the CPU kernel's on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "trireme/core/tensor.h"
#include "trireme/cuda/device.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

// Every test starts with this: without a GPU (CI, the dev machine) the suite skips, green.
#define TRIREME_REQUIRE_GPU()                                                                  \
  do {                                                                                         \
    if (!::trireme::cuda::is_available())                                                      \
      GTEST_SKIP() << "no usable GPU: " << ::trireme::cuda::unavailable_reason();              \
  } while (0)

namespace trireme::testing {

inline Tensor to_cpu_f64(const Tensor& t) { return to_dtype(to_device(t.detach(), Device::cpu()), DType::f64); }

// Tolerance for a result computed in `dtype` (CPU and GPU may round differently in the last bits).
inline double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-10;
    case DType::f32: return 2e-5;
    case DType::bf16: return 2e-2;
    case DType::f16: return 4e-3;
    default: return 0.0;
  }
}

// Expects |gpu - cpu| <= tol * (1 + |cpu|) elementwise (NaNs must agree), same shape and dtype.
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_TRUE(gpu.device().is_cuda()) << what << ": the result is on " << gpu.device();
  ASSERT_EQ(gpu.sizes(), cpu.sizes()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  Tensor g = contiguous(to_cpu_f64(gpu)), c = contiguous(to_cpu_f64(cpu));
  const double* gp = g.data<double>();
  const double* cp = c.data<double>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const bool ok = (std::isnan(gp[i]) && std::isnan(cp[i])) || gp[i] == cp[i] ||
                    std::abs(gp[i] - cp[i]) <= tol * (1.0 + std::abs(cp[i]));
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.numel() << " elements differ; first at " << first
                    << ": gpu " << (first >= 0 ? gp[first] : 0.0) << " cpu " << (first >= 0 ? cp[first] : 0.0);
}

}  // namespace trireme::testing
