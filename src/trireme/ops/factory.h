// Tensor factories. Random ones draw from an explicit Generator (see core/rng.h).
//
//   Generator gen(42);
//   Tensor w = randn({768, 768}, gen);                 // f32 on the CPU
//   Tensor ids = from_vector<int64_t>({1, 2, 3}, {3});
#pragma once

#include <vector>

#include "trireme/core/rng.h"
#include "trireme/core/tensor.h"

namespace trireme {

Tensor zeros(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& sizes, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = Device::cpu());
Tensor arange(double start, double end, double step, DType dtype = DType::f32, Device device = Device::cpu());
Tensor rand(const Shape& sizes, Generator& gen, DType dtype = DType::f32, Device device = Device::cpu());
Tensor randn(const Shape& sizes, Generator& gen, DType dtype = DType::f32, Device device = Device::cpu());
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// From host data, row-major; the element count must match the shape.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& sizes, Device device = Device::cpu());

}  // namespace trireme
