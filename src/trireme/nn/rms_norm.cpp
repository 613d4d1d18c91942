// RMSNorm layer.
#include "trireme/nn/rms_norm.h"

#include "trireme/nn/init.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::nn {

RMSNorm::RMSNorm(int64_t d, double e, DType dtype) : Module("RMSNorm"), dim(d), eps(e) {
  TRIREME_CHECK(d > 0 && e >= 0, "RMSNorm: dim must be positive and eps non-negative, got ", d, ", ", e);
  weight = register_parameter("weight", ones({d}, dtype));
}

void RMSNorm::reset_parameters(uint64_t) { init_constant(weight, 1.0); }

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, weight, eps); }

}  // namespace trireme::nn
