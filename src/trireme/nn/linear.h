// Linear: y = x · Wᵀ + b, weight (out, in), bias (out). Default init U(-1/sqrt(in), 1/sqrt(in)).
//
//   nn::Linear fc(768, 3072);
//   Tensor y = fc.forward(x);   // x (..., 768) -> (..., 3072)
#pragma once

#include "trireme/nn/module.h"

namespace trireme::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  void reset_parameters(uint64_t seed) override;

  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
};

}  // namespace trireme::nn
