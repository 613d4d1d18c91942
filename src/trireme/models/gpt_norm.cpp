// The GPT's LayerNorm / RMSNorm (see gpt_norm.h).
#include "trireme/models/gpt_norm.h"

#include "trireme/models/gpt.h"
#include "trireme/nn/init.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::models {

GPTNorm::GPTNorm(Kind k, int64_t d, double e, bool has_bias)
    : Module(k == Kind::rms ? "RMSNorm" : "LayerNorm"), kind(k), dim(d), eps(e) {
  TRIREME_CHECK(d > 0 && e >= 0, "GPTNorm: dim must be positive and eps non-negative, got ", d, ", ", e);
  TRIREME_CHECK(!(k == Kind::rms && has_bias), "GPTNorm: an RMSNorm has no bias");
  weight = register_parameter("weight", ones({d}));
  if (has_bias) bias = register_parameter("bias", zeros({d}));
}

void GPTNorm::reset_parameters(uint64_t) {
  nn::init_constant(weight, 1.0);
  if (bias.defined()) nn::init_constant(bias, 0.0);
}

std::shared_ptr<GPTNorm> gpt_norm(const GPTConfig& c) {
  const bool rms = c.arch == GPTArch::llama;
  return std::make_shared<GPTNorm>(rms ? GPTNorm::Kind::rms : GPTNorm::Kind::layer, c.d_model, c.ln_eps, c.bias && !rms);
}

Tensor GPTNorm::apply(const Tensor& x, const Tensor& w, const Tensor& b) const {
  return kind == Kind::rms ? rms_norm(x, w, eps) : layer_norm(x, w, b, eps);
}

}  // namespace trireme::models
