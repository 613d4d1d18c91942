// CUDA softmax and log_softmax over the last dim of a contiguous (R, D) tensor, and their
// backwards, the twins of kernels/cpu/softmax.cpp. One block per row; stable (each row is
// shifted by its max); sums in the accumulation type with a fixed block-reduction order.
#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D, bool Log>
__global__ void softmax_kernel(const D* x, int64_t d, D* y) {
  using A = dacc_t<D>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const D* xr = x + r * d;
  D* yr = y + r * d;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) m = max(m, to_acc(xr[j]));
  m = block_max(m, scratch);
  // An all -inf row (everything masked): shift by 0, as the CPU does.
  if (isinf(m) && m < A(0)) m = A(0);
  A s = A(0);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += m_exp(to_acc(xr[j]) - m);
  s = block_sum(s, scratch);
  if constexpr (Log) {
    const A log_s = m_log(s);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = from_acc<D>((to_acc(xr[j]) - m) - log_s);
  } else {
    const A inv = A(1) / s;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = from_acc<D>(m_exp(to_acc(xr[j]) - m) * inv);
  }
}

// softmax:     grad_x = y * (g - Σ g y)
// log_softmax: grad_x = g - exp(y) * Σ g
template <class D, bool Log>
__global__ void softmax_backward_kernel(const D* g, const D* y, int64_t d, D* gx) {
  using A = dacc_t<D>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const D* gr = g + r * d;
  const D* yr = y + r * d;
  D* out = gx + r * d;
  A s = A(0);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += Log ? to_acc(gr[j]) : to_acc(gr[j]) * to_acc(yr[j]);
  s = block_sum(s, scratch);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const A gv = to_acc(gr[j]), yv = to_acc(yr[j]);
    out[j] = from_acc<D>(Log ? gv - m_exp(yv) * s : yv * (gv - s));
  }
}

template <class T, bool Log>
void softmax_cuda(const Tensor& x, Tensor& y) {
  using D = device_t<T>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  if (rows == 0) return;
  LaunchContext ctx(y);
  softmax_kernel<D, Log><<<unsigned(rows), row_block_threads(d, 512), 0, ctx.stream>>>(dptr<T>(x), d, dptr<T>(y));
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T, bool Log>
void softmax_backward_cuda(const Tensor& grad, const Tensor& y, Tensor& grad_x) {
  using D = device_t<T>;
  const int64_t d = y.size(-1), rows = d ? y.numel() / d : 0;
  if (rows == 0) return;
  LaunchContext ctx(grad_x);
  softmax_backward_kernel<D, Log><<<unsigned(rows), row_block_threads(d, 512), 0, ctx.stream>>>(
      dptr<T>(grad), dptr<T>(y), d, dptr<T>(grad_x));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_softmax) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<SoftmaxKernel, double, float, bf16_t, f16_t>(
      "softmax", cuda, []<class T>() { return &softmax_cuda<T, false>; });
  registry.add_each<SoftmaxKernel, double, float, bf16_t, f16_t>(
      "log_softmax", cuda, []<class T>() { return &softmax_cuda<T, true>; });
  registry.add_each<SoftmaxBackwardKernel, double, float, bf16_t, f16_t>(
      "softmax_backward", cuda, []<class T>() { return &softmax_backward_cuda<T, false>; });
  registry.add_each<SoftmaxBackwardKernel, double, float, bf16_t, f16_t>(
      "log_softmax_backward", cuda, []<class T>() { return &softmax_backward_cuda<T, true>; });
}

}  // namespace trireme::cuda_kernels
