// MLP layer.
#include "trireme/nn/mlp.h"

namespace trireme::nn {

MLP::MLP(int64_t d, int64_t hidden, bool bias, double p, GeluApprox gelu, DType dtype)
    : Module("MLP"), gelu_approx(gelu) {
  if (hidden == 0) hidden = 4 * d;
  c_fc = register_module("c_fc", std::make_shared<Linear>(d, hidden, bias, dtype));
  c_proj = register_module("c_proj", std::make_shared<Linear>(hidden, d, bias, dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor MLP::forward(const Tensor& x) {
  return dropout->forward(c_proj->forward(gelu(c_fc->forward(x), gelu_approx)));
}

}  // namespace trireme::nn
