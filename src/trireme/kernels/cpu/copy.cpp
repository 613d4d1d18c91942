// CPU copy (with dtype conversion, any strides) and fill kernels.
#include <cstring>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

template <class Dst>
void copy_cpu(const Tensor& src, Tensor& dst) {
  dispatch_dtype(src.dtype(), [&]<class Src>() {
    for_each_row<2>(dst.sizes(), {loop_operand(dst), loop_operand(src)}, [&](auto& p, auto& s, int64_t n) {
      Dst* o = reinterpret_cast<Dst*>(p[0]);
      const Src* x = reinterpret_cast<const Src*>(p[1]);
      if constexpr (std::is_same_v<Src, Dst>) {
        if (s[0] == int64_t(sizeof(Dst)) && s[1] == int64_t(sizeof(Src))) {
          std::memcpy(o, x, size_t(n) * sizeof(Dst));
          return;
        }
      }
      if (s[0] == int64_t(sizeof(Dst)) && s[1] == int64_t(sizeof(Src))) {  // unit strides: a vectorised loop
        for (int64_t i = 0; i < n; ++i) o[i] = Dst(acc_t<Src>(x[i]));
        return;
      }
      const int64_t so = s[0] / int64_t(sizeof(Dst)), sx = s[1] / int64_t(sizeof(Src));
      for (int64_t i = 0; i < n; ++i) {
        // Through the wider type: bf16 -> f16 goes via float, i64 -> bf16 via float.
        o[i * so] = Dst(acc_t<Src>(x[i * sx]));
      }
    });
  });
}

template <class T>
void fill_cpu(Tensor& out, double value) {
  const T v = T(acc_t<T>(value));
  for_each_row<1>(out.sizes(), {loop_operand(out)}, [&](auto& p, auto& s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const int64_t so = s[0] / int64_t(sizeof(T));
    for (int64_t i = 0; i < n; ++i) o[i * so] = v;
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_copy) {
  registry.add_each<CopyKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "copy", DeviceType::cpu, []<class T>() { return &copy_cpu<T>; });
  registry.add_each<FillKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "fill", DeviceType::cpu, []<class T>() { return &fill_cpu<T>; });
}

}  // namespace trireme::cpu
