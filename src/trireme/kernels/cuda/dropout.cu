// CUDA inverted dropout, the twin of kernels/cpu/dropout.cpp: element i of contiguous x is kept,
// times 1 / (1 - p), iff rng_uniform(seed, stream, offset + i) >= p, through the same inline
// Philox (kernels/philox.h), so the mask is bit-identical to the CPU's.
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/philox.h"
#include "trireme/kernels/registry.h"
#include "trireme/kernels/scalar_slots.h"

namespace trireme::cuda_kernels {
namespace {

// The Philox key of a call: its stream changes per step (a replay places it in device memory,
// Note [scalars in device memory]).
struct DropoutKey {
  uint64_t seed, stream, offset;
};

template <class D>
__global__ void dropout_kernel(const D* x, int64_t n, dacc_t<D> scale, uint32_t threshold, DropoutKey by_value,
                               const DropoutKey* placed, D* y) {
  using A = dacc_t<D>;
  const DropoutKey key = placed ? *placed : by_value;
  const uint64_t seed = key.seed, stream = key.stream, offset = key.offset;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const bool keep = dropout_keep(philox_word0(seed, stream, offset + uint64_t(i)), threshold);
    y[i] = keep ? from_acc<D>(to_acc(x[i]) * scale) : from_acc<D>(A(0));
  }
}

template <class T>
void dropout_cuda(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset, Tensor& y) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t n = x.numel();
  if (n == 0) return;
  const DropoutKey key{seed, stream, offset};
  const DropoutKey* placed = nullptr;
  if (!place_scalars(key, placed)) return;
  LaunchContext ctx(y);
  dropout_kernel<D><<<grid_for(n), kBlock, 0, ctx.stream>>>(dptr<T>(x), n, A(1.0 / (1.0 - p)), dropout_threshold(p),
                                                            key, placed, dptr<T>(y));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_dropout) {
  registry.add_each<DropoutKernel, double, float, bf16_t, f16_t>(
      "dropout", DeviceType::cuda, []<class T>() { return &dropout_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
