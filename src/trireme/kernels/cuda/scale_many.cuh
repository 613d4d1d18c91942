// Internal to the CUDA kernels: every element of many contiguous tensors multiplied by one factor,
// in one launch. Gradient clipping's scale (optim.cu: scale_many, the factor in device memory) and
// the f16 loss scaler's unscale (amp.cu: amp_unscale and amp_unscale_many, the factor from the
// host, an inf or NaN flagged). A block per chunk of kScaleChunk elements of one tensor; the
// launch's tensors are a table in the kernel's parameters (block_table.cuh), so a call of more
// tensors than a table holds takes a few launches.
#pragma once

#include <algorithm>
#include <memory>
#include <span>

#include "trireme/kernels/cuda/block_table.cuh"
#include "trireme/kernels/cuda/launch.cuh"

namespace trireme::cuda_kernels {

inline constexpr int64_t kScaleChunk = 8 * kBlock;

template <class D>
struct ScaleTable {
  static constexpr int kTensors = 640;
  D* x[kTensors];
  int64_t n[kTensors];
  int64_t first[kTensors + 1];  // tensor k's chunks are blocks [first[k], first[k + 1])
  const double* factor;         // in device memory; null: factor_value
  double factor_value;
  float* found_inf;             // set to 1 where an element is inf or NaN before its scaling; null: unchecked
  int tensors;
};

// x = x * A(factor) in A = dacc_t<D>, the factor rounded to A once: mul_ by a scalar's bits.
template <class D>
__global__ void __launch_bounds__(kBlock) scale_many_kernel(const __grid_constant__ ScaleTable<D> t) {
  using A = dacc_t<D>;
  const int64_t b = blockIdx.x;
  const int k = tensor_of_block(t.first, t.tensors, b);
  const A f = A(t.factor ? *t.factor : t.factor_value);
  D* x = t.x[k];
  const int64_t begin = (b - t.first[k]) * kScaleChunk, end = min(t.n[k], begin + kScaleChunk);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A v = to_acc(x[i]);
    bad = bad || !isfinite(v);
    x[i] = from_acc<D>(v * f);
  }
  if (bad && t.found_inf) *t.found_inf = 1.0f;  // every writer stores 1: the race is benign
}

// Scales `tensors` (contiguous, of T, on one device) by *factor (device memory) or, when that is
// null, by factor_value; flags found_inf when it is not null.
template <class T>
void launch_scale_many(std::span<Tensor* const> tensors, const double* factor, double factor_value, float* found_inf) {
  using D = device_t<T>;
  using Table = ScaleTable<D>;
  static_assert(sizeof(Table) <= 32000, "a kernel's parameters are at most 32764 bytes");
  if (tensors.empty()) return;
  LaunchContext ctx(*tensors[0]);
  auto table = std::make_unique<Table>();
  for (size_t k0 = 0; k0 < tensors.size(); k0 += Table::kTensors) {
    Table& t = *table;
    t.factor = factor;
    t.factor_value = factor_value;
    t.found_inf = found_inf;
    t.tensors = int(std::min<size_t>(Table::kTensors, tensors.size() - k0));
    t.first[0] = 0;
    for (int k = 0; k < t.tensors; ++k) {
      Tensor& x = *tensors[k0 + size_t(k)];
      t.x[k] = dptr<T>(x);
      t.n[k] = x.numel();
      t.first[k + 1] = t.first[k] + (t.n[k] + kScaleChunk - 1) / kScaleChunk;
    }
    if (t.first[t.tensors] == 0) continue;  // only empty tensors
    scale_many_kernel<D><<<unsigned(t.first[t.tensors]), kBlock, 0, ctx.stream>>>(t);
    TRIREME_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace trireme::cuda_kernels
