// CUDA mixed-precision kernels: amp_unscale (of one gradient or many) and accumulate_widening,
// the twins of kernels/cpu/amp.cpp. amp_unscale's flag is written on the device (every writer
// stores 1, so the race is benign): no host round trip per tensor.
#include <cmath>

#include "trireme/kernels/amp.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/scale_many.cuh"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

// One gradient or many in one launch (scale_many.cuh, shared with clipping's scale): each element
// times 1/scale in its accumulation type, an inf or NaN flagged, the CPU kernel's operations.
template <class T>
void amp_unscale_many_cuda(std::span<Tensor* const> grads, Tensor& found_inf, double inv_scale) {
  launch_scale_many<T>(grads, nullptr, inv_scale, found_inf.data<float>());
}

template <class T>
void amp_unscale_cuda(Tensor& grad, Tensor& found_inf, double inv_scale) {
  Tensor* one[] = {&grad};
  amp_unscale_many_cuda<T>(one, found_inf, inv_scale);
}

template <class D>
__global__ void accumulate_widening_kernel(float* acc, const D* g, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) acc[i] += to_acc(g[i]);
}

template <class T>
void accumulate_widening_cuda(Tensor& acc, const Tensor& incoming) {
  using D = device_t<T>;
  const int64_t n = acc.numel();
  if (n == 0) return;
  LaunchContext ctx(acc);
  accumulate_widening_kernel<D><<<grid_for(n), kBlock, 0, ctx.stream>>>(acc.data<float>(), dptr<T>(incoming), n);
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_amp) {
  registry.add_each<AccumulateWideningKernel, bf16_t, f16_t>("accumulate_widening", DeviceType::cuda,
                                                             []<class T>() { return &accumulate_widening_cuda<T>; });
  registry.add_each<AmpUnscaleKernel, double, float, bf16_t, f16_t>("amp_unscale", DeviceType::cuda,
                                                                    []<class T>() { return &amp_unscale_cuda<T>; });
  registry.add_each<AmpUnscaleManyKernel, double, float, bf16_t, f16_t>(
      "amp_unscale_many", DeviceType::cuda, []<class T>() { return &amp_unscale_many_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
