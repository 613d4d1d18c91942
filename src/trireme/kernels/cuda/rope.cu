// CUDA rotary position embedding (interleaved pairs) on x (B, H, T, hd) with last-dim stride 1,
// the twin of kernels/cpu/rope.cpp. The cos/sin table (T, hd/2) is computed on the host in
// double exactly as the CPU computes it (angles reach thousands of radians), then uploaded, so
// both devices rotate by the same rounded factors.
#include <cmath>
#include <vector>

#include "trireme/kernels/cuda/host_index.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D>
__global__ void rotary_kernel(const D* x, int64_t s0, int64_t s1, int64_t s2, int64_t nh, int64_t nt, int64_t half,
                              const dacc_t<D>* cs, const dacc_t<D>* sn, int64_t pairs, D* out) {
  using A = dacc_t<D>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < pairs; e += step) {
    const int64_t i = e % half, r = e / half;  // r: row (b, h, t) in out's row-major order
    const int64_t t = r % nt, h = (r / nt) % nh, b = r / (nt * nh);
    const D* xr = x + b * s0 + h * s1 + t * s2;
    const A x0 = to_acc(xr[2 * i]), x1 = to_acc(xr[2 * i + 1]);
    const A c = cs[t * half + i], s = sn[t * half + i];
    D* orow = out + r * 2 * half;
    orow[2 * i] = from_acc<D>(x0 * c - x1 * s);
    orow[2 * i + 1] = from_acc<D>(x0 * s + x1 * c);
  }
}

template <class T>
void rotary_cuda(const Tensor& x, double base, int64_t position_offset, bool inverse, Tensor& out) {
  using A = acc_t<T>;
  const int64_t nb = x.size(0), nh = x.size(1), nt = x.size(2), hd = x.size(3), half = hd / 2;
  const int64_t pairs = nb * nh * nt * half;
  if (pairs == 0) return;
  std::vector<A> table(size_t(2 * nt * half));
  for (int64_t t = 0; t < nt; ++t) {
    const double pos = double(position_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos * std::pow(base, -2.0 * double(i) / double(hd));
      table[size_t(t * half + i)] = A(std::cos(theta));
      table[size_t(nt * half + t * half + i)] = A(inverse ? -std::sin(theta) : std::sin(theta));
    }
  }
  const Tensor dev_table = upload(table, x.device());
  const A* cs = dev_table.data<A>();
  LaunchContext ctx(out);
  rotary_kernel<device_t<T>><<<grid_for(pairs), kBlock, 0, ctx.stream>>>(
      dptr<T>(x), x.stride(0), x.stride(1), x.stride(2), nh, nt, half, cs, cs + nt * half, pairs, dptr<T>(out));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_rope) {
  registry.add_each<RotaryKernel, double, float, bf16_t, f16_t>(
      "rotary_embedding", DeviceType::cuda, []<class T>() { return &rotary_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
