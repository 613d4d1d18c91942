// MLP: c_fc (d -> hidden, default 4d), GELU (tanh approximation, as GPT-2), c_proj (hidden -> d),
// then dropout.
//
//   nn::MLP mlp(768);
//   Tensor y = mlp.forward(x);   // (..., 768) -> (..., 768)
#pragma once

#include <memory>

#include "trireme/nn/dropout.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/elementwise.h"

namespace trireme::nn {

class MLP : public Module {
 public:
  explicit MLP(int64_t d_model, int64_t hidden = 0, bool bias = true, double dropout = 0.0,
               GeluApprox gelu = GeluApprox::tanh, DType dtype = DType::f32);
  Tensor forward(const Tensor& x);

  GeluApprox gelu_approx;
  std::shared_ptr<Linear> c_fc;
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace trireme::nn
