// Linear layer.
#include "trireme/nn/linear.h"

#include <cmath>

#include "trireme/nn/init.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"

namespace trireme::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, DType dtype)
    : Module("Linear"), in_features(in), out_features(out) {
  TRIREME_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  weight = register_parameter("weight", zeros({out, in}, dtype));
  if (has_bias) bias = register_parameter("bias", zeros({out}, dtype));
  reset_parameters(0);
}

void Linear::reset_parameters(uint64_t seed) {
  const double bound = 1.0 / std::sqrt(double(in_features));
  const std::string prefix = qualified_name();
  init_uniform(weight, -bound, bound, seed, join_name(prefix, "weight"));
  if (bias.defined()) init_uniform(bias, -bound, bound, seed, join_name(prefix, "bias"));
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

}  // namespace trireme::nn
