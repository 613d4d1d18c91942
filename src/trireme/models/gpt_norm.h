// The GPT's norms over the last dim, one class for both architectures so that the blocks and the
// model hold them alike and under the same names (weight, and bias where there is one):
//   LayerNorm (arch gpt2):  (x - mean) / sqrt(var + eps) * weight + bias
//   RMSNorm   (arch llama): x / sqrt(mean(x²) + eps) * weight
//
//   GPTNorm ln(GPTNorm::Kind::rms, 4096, 1e-6, /*bias=*/false);
//   Tensor y = ln.forward(x);
#pragma once

#include "trireme/nn/module.h"

namespace trireme::models {

class GPTNorm : public nn::Module {
 public:
  enum class Kind { layer, rms };
  GPTNorm(Kind kind, int64_t dim, double eps, bool bias);
  Tensor forward(const Tensor& x) const { return apply(x, weight, bias); }
  // The norm with these parameters in place of its own (the sequence-parallel path passes views
  // whose gradients are summed over tp).
  Tensor apply(const Tensor& x, const Tensor& w, const Tensor& b) const;
  void reset_parameters(uint64_t seed) override;

  Kind kind;
  int64_t dim;
  double eps;
  Tensor weight;  // (dim)
  Tensor bias;    // (dim), LayerNorm only; or undefined
};

}  // namespace trireme::models
