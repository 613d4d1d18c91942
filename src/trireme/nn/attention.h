// MultiHeadAttention: causal self-attention with a fused q|k|v projection (GPT-2 layout).
//
//   qkv = c_attn(x)                      x (B, T, d) -> (B, T, 3d), columns [q | k | v]
//   q, k, v -> (B, H, T, hd)             split the last dim, view as heads, transpose
//   (q, k = rotary(q), rotary(k))        when `rotary`
//   y = scaled_dot_product_attention(q, k, v, causal)  -> (B, T, d) -> c_proj -> dropout
//
// Attention-probability dropout is not applied (the fused attention op has none); the
// residual dropout after c_proj is.
//
//   nn::MultiHeadAttention attn({.d_model = 768, .n_head = 12});
//   Tensor y = attn.forward(x);
#pragma once

#include <memory>

#include "trireme/nn/dropout.h"
#include "trireme/nn/linear.h"

namespace trireme::nn {

struct AttentionOptions {
  int64_t d_model = 0;
  int64_t n_head = 1;
  bool bias = true;
  double dropout = 0.0;
  bool rotary = false;
  double rotary_base = 10000.0;
  DType dtype = DType::f32;
};

class MultiHeadAttention : public Module {
 public:
  explicit MultiHeadAttention(const AttentionOptions& options);
  Tensor forward(const Tensor& x);

  AttentionOptions options;
  std::shared_ptr<Linear> c_attn;  // d -> 3d, output columns q | k | v
  std::shared_ptr<Linear> c_proj;  // d -> d
  std::shared_ptr<Dropout> resid_dropout;
};

}  // namespace trireme::nn
