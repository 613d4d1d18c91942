// RMSNorm over the last dim: x / sqrt(mean(x²) + eps) * weight. Init weight 1.
//
//   nn::RMSNorm norm(4096);
//   Tensor y = norm.forward(x);
#pragma once

#include "trireme/nn/module.h"

namespace trireme::nn {

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps = 1e-6, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  void reset_parameters(uint64_t seed) override;

  int64_t dim;
  double eps;
  Tensor weight;  // (dim)
};

}  // namespace trireme::nn
