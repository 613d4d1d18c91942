// CUDA rotary position embedding (interleaved pairs) on x (B, H, T, hd) with last-dim stride 1,
// the twin of kernels/cpu/rope.cpp. The cos/sin table (positions, hd/2) is computed on the host in
// double exactly as the CPU computes it (angles reach thousands of radians), then uploaded, so
// both devices rotate by the same rounded factors. It is built once per device, head size and
// base and kept (grown when a longer sequence comes): building it on every call cost a host
// computation and a synchronous upload per layer and direction, which left the GPU idle for
// 110 of a 416 ms LoRA step of a Qwen2-0.5B-shaped model on an H200.
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "trireme/kernels/cuda/host_index.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

// cs and sn point at the table rows of position `offset`; sign is -1 for the inverse rotation
// (negating the sine is exact, so both directions share one table).
template <class D>
__global__ void rotary_kernel(const D* x, int64_t s0, int64_t s1, int64_t s2, int64_t nh, int64_t nt, int64_t half,
                              const dacc_t<D>* cs, const dacc_t<D>* sn, dacc_t<D> sign, int64_t pairs, D* out) {
  using A = dacc_t<D>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < pairs; e += step) {
    const int64_t i = e % half, r = e / half;  // r: row (b, h, t) in out's row-major order
    const int64_t t = r % nt, h = (r / nt) % nh, b = r / (nt * nh);
    const D* xr = x + b * s0 + h * s1 + t * s2;
    const A x0 = to_acc(xr[2 * i]), x1 = to_acc(xr[2 * i + 1]);
    const A c = cs[t * half + i], s = sign * sn[t * half + i];
    D* orow = out + r * 2 * half;
    orow[2 * i] = from_acc<D>(x0 * c - x1 * s);
    orow[2 * i + 1] = from_acc<D>(x0 * s + x1 * c);
  }
}

// The cos and sin of positions [0, rows) on one device: cos rows, then sin rows, (rows, half) each.
template <class A>
struct RopeTable {
  Tensor values;
  int64_t rows = 0;
};

// The table of (device, hd, base) covering positions [0, positions), built or grown on first
// need (a copy of the handle: another thread may grow the kept one). Tables are never freed: a kernel queued on any stream may still read one, and a
// static's destructor would run after the CUDA runtime is gone. Growth doubles, so a process
// holds at most twice its longest table per (device, hd, base).
template <class A>
RopeTable<A> rope_table(Device device, int64_t hd, double base, int64_t positions) {
  static std::mutex mu;
  static auto* tables = new std::map<std::tuple<int, int64_t, uint64_t>, RopeTable<A>>();
  static auto* retired = new std::vector<Tensor>();
  uint64_t base_bits;
  std::memcpy(&base_bits, &base, sizeof base);
  std::lock_guard<std::mutex> lock(mu);
  RopeTable<A>& t = (*tables)[{device.index, hd, base_bits}];
  if (t.rows >= positions) return t;
  const int64_t rows = std::max(positions, 2 * t.rows), half = hd / 2;
  std::vector<A> host(size_t(2 * rows * half));
  for (int64_t p = 0; p < rows; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double theta = double(p) * std::pow(base, -2.0 * double(i) / double(hd));
      host[size_t(p * half + i)] = A(std::cos(theta));
      host[size_t(rows * half + p * half + i)] = A(std::sin(theta));
    }
  }
  if (t.values.defined()) retired->push_back(t.values);
  t.values = upload(host, device);
  t.rows = rows;
  return t;
}

template <class T>
void rotary_cuda(const Tensor& x, double base, int64_t position_offset, bool inverse, Tensor& out) {
  using A = acc_t<T>;
  const int64_t nb = x.size(0), nh = x.size(1), nt = x.size(2), hd = x.size(3), half = hd / 2;
  const int64_t pairs = nb * nh * nt * half;
  if (pairs == 0) return;
  const RopeTable<A> table = rope_table<A>(x.device(), hd, base, position_offset + nt);
  const A* cs = table.values.template data<A>() + position_offset * half;
  const A* sn = cs + table.rows * half;
  LaunchContext ctx(out);
  rotary_kernel<device_t<T>><<<grid_for(pairs), kBlock, 0, ctx.stream>>>(
      dptr<T>(x), x.stride(0), x.stride(1), x.stride(2), nh, nt, half, cs, sn, A(inverse ? -1 : 1), pairs, dptr<T>(out));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_rope) {
  registry.add_each<RotaryKernel, double, float, bf16_t, f16_t>(
      "rotary_embedding", DeviceType::cuda, []<class T>() { return &rotary_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
