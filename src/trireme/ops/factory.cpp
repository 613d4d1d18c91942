// Factories: filled and random tensors, and tensors from host data.
#include "trireme/ops/factory.h"

#include <cmath>
#include <cstring>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"

namespace trireme {

namespace {
Tensor filled(const Shape& sizes, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(sizes, dtype, device);
  find_kernel<FillKernel>("fill", device, dtype)(t, value);
  return t;
}

// Random values are drawn on the CPU from counters, then moved: identical on every device.
template <class Draw>
Tensor random(const Shape& sizes, Generator& gen, DType dtype, Device device, Draw draw, const char* op) {
  TRIREME_CHECK(is_floating(dtype), op, ": needs a floating dtype, got ", dtype);
  Tensor host = Tensor::empty(sizes, dtype, Device::cpu());
  const uint64_t first = gen.reserve(uint64_t(host.numel()));
  dispatch_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_floating_point_v<acc_t<T>>) {
      T* p = host.data<T>();
      for (int64_t i = 0; i < host.numel(); ++i) p[i] = T(acc_t<T>(draw(gen.seed(), gen.stream(), first + uint64_t(i))));
    }
  });
  return to_device(host, device);
}
}  // namespace

Tensor zeros(const Shape& sizes, DType dtype, Device device) { return filled(sizes, 0.0, dtype, device); }
Tensor ones(const Shape& sizes, DType dtype, Device device) { return filled(sizes, 1.0, dtype, device); }
Tensor full(const Shape& sizes, double value, DType dtype, Device device) { return filled(sizes, value, dtype, device); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return filled({}, value, dtype, device); }

Tensor arange(int64_t end, DType dtype, Device device) { return arange(0.0, double(end), 1.0, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  TRIREME_CHECK(step != 0.0, "arange: step must be non-zero");
  int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  Tensor host = Tensor::empty({n}, dtype, Device::cpu());
  dispatch_dtype(dtype, [&]<class T>() {
    T* p = host.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = T(acc_t<T>(start + double(i) * step));
  });
  return to_device(host, device);
}

Tensor rand(const Shape& sizes, Generator& gen, DType dtype, Device device) {
  return random(sizes, gen, dtype, device, rng_uniform_f64, "rand");
}

Tensor randn(const Shape& sizes, Generator& gen, DType dtype, Device device) {
  return random(sizes, gen, dtype, device, rng_normal_f64, "randn");
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.sizes(), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.sizes(), value, t.dtype(), t.device()); }

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& sizes, Device device) {
  TRIREME_CHECK(int64_t(data.size()) == shape_numel(sizes), "from_vector: ", data.size(),
                " values for shape ", sizes, " (", shape_numel(sizes), " elements)");
  Tensor host = Tensor::empty(sizes, dtype_v<T>, Device::cpu());
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = host.data<bool>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  } else if (!data.empty()) {
    std::memcpy(host.data_ptr(), data.data(), data.size() * sizeof(T));
  }
  return to_device(host, device);
}

template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<bf16_t>(const std::vector<bf16_t>&, const Shape&, Device);
template Tensor from_vector<f16_t>(const std::vector<f16_t>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, Device);

}  // namespace trireme
