// LayerNorm layer.
#include "trireme/nn/layer_norm.h"

#include "trireme/nn/init.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::nn {

LayerNorm::LayerNorm(int64_t d, double e, bool has_bias, DType dtype) : Module("LayerNorm"), dim(d), eps(e) {
  TRIREME_CHECK(d > 0 && e >= 0, "LayerNorm: dim must be positive and eps non-negative, got ", d, ", ", e);
  weight = register_parameter("weight", ones({d}, dtype));
  if (has_bias) bias = register_parameter("bias", zeros({d}, dtype));
}

void LayerNorm::reset_parameters(uint64_t) {
  init_constant(weight, 1.0);
  if (bias.defined()) init_constant(bias, 0.0);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

}  // namespace trireme::nn
