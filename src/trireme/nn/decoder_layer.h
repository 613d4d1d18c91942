// TransformerDecoderLayer: a pre-LayerNorm GPT-2 block.
//
//   x = x + attn(ln_1(x))
//   x = x + mlp(ln_2(x))
//
//   nn::TransformerDecoderLayer block({.d_model = 768, .n_head = 12});
//   Tensor y = block.forward(x);   // (B, T, 768)
#pragma once

#include <memory>

#include "trireme/nn/attention.h"
#include "trireme/nn/layer_norm.h"
#include "trireme/nn/mlp.h"

namespace trireme::nn {

struct DecoderLayerOptions {
  int64_t d_model = 0;
  int64_t n_head = 1;
  int64_t mlp_hidden = 0;  // 0: 4 * d_model
  bool bias = true;
  double dropout = 0.0;
  double ln_eps = 1e-5;
  GeluApprox gelu = GeluApprox::tanh;
  bool rotary = false;
  DType dtype = DType::f32;
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const DecoderLayerOptions& options);
  Tensor forward(const Tensor& x);

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

}  // namespace trireme::nn
