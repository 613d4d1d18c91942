// CPU rotary position embedding (interleaved pairs) on x (B, H, T, hd) with last-dim stride 1.
//
// For position p = position_offset + t and pair i in [0, hd/2), with θ_i = p · base^(-2i/hd):
//   out[2i]   = x[2i] cos θ_i - x[2i+1] sin θ_i
//   out[2i+1] = x[2i] sin θ_i + x[2i+1] cos θ_i
// i.e. (x[2i], x[2i+1]) as a complex number times e^{iθ_i}. The inverse (the backward, since a
// rotation's transpose is its inverse) uses -θ_i.
#include <cmath>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class T>
void rotary_cpu(const Tensor& x, double base, int64_t position_offset, bool inverse, Tensor& out) {
  using A = acc_t<T>;
  const int64_t nb = x.size(0), nh = x.size(1), nt = x.size(2), hd = x.size(3), half = hd / 2;
  // cos/sin table (T, hd/2), angles in double: p · base^(-2i/hd) reaches thousands of radians.
  std::vector<A> cs(size_t(nt * half)), sn(size_t(nt * half));
  for (int64_t t = 0; t < nt; ++t) {
    const double pos = double(position_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos * std::pow(base, -2.0 * double(i) / double(hd));
      cs[size_t(t * half + i)] = A(std::cos(theta));
      sn[size_t(t * half + i)] = A(inverse ? -std::sin(theta) : std::sin(theta));
    }
  }
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t s0 = x.stride(0), s1 = x.stride(1), s2 = x.stride(2);
  parallel_for(nb * nh * nt, 3 * hd, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % nt, h = (r / nt) % nh, b = r / (nt * nh);
      const T* xr = px + b * s0 + h * s1 + t * s2;
      T* orow = po + r * hd;
      const A* c = cs.data() + t * half;
      const A* s = sn.data() + t * half;
      for (int64_t i = 0; i < half; ++i) {
        const A x0 = A(xr[2 * i]), x1 = A(xr[2 * i + 1]);
        orow[2 * i] = T(x0 * c[i] - x1 * s[i]);
        orow[2 * i + 1] = T(x0 * s[i] + x1 * c[i]);
      }
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_rope) {
  registry.add_each<RotaryKernel, double, float, bf16_t, f16_t>(
      "rotary_embedding", DeviceType::cpu, []<class T>() { return &rotary_cpu<T>; });
}

}  // namespace trireme::cpu
