// LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias. Init weight 1, bias 0.
//
//   nn::LayerNorm ln(768);            // bias = false drops the shift
//   Tensor y = ln.forward(x);         // x (..., 768)
#pragma once

#include "trireme/nn/module.h"

namespace trireme::nn {

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  void reset_parameters(uint64_t seed) override;

  int64_t dim;
  double eps;
  Tensor weight;  // (dim)
  Tensor bias;    // (dim) or undefined
};

}  // namespace trireme::nn
