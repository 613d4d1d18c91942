// MultiHeadAttention layer.
#include "trireme/nn/attention.h"

#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

namespace trireme::nn {

MultiHeadAttention::MultiHeadAttention(const AttentionOptions& o) : Module("MultiHeadAttention"), options(o) {
  TRIREME_CHECK(o.d_model > 0 && o.n_head > 0 && o.d_model % o.n_head == 0, "MultiHeadAttention: d_model (",
                o.d_model, ") must be a positive multiple of n_head (", o.n_head, ")");
  TRIREME_CHECK(!o.rotary || (o.d_model / o.n_head) % 2 == 0, "MultiHeadAttention: rotary needs an even head ",
                "dim, got ", o.d_model / o.n_head);
  c_attn = register_module("c_attn", std::make_shared<Linear>(o.d_model, 3 * o.d_model, o.bias, o.dtype));
  c_proj = register_module("c_proj", std::make_shared<Linear>(o.d_model, o.d_model, o.bias, o.dtype));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(o.dropout));
}

Tensor MultiHeadAttention::forward(const Tensor& x) {
  TRIREME_CHECK(x.dim() == 3 && x.size(2) == options.d_model, "MultiHeadAttention: expected input (B, T, ",
                options.d_model, "), got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), C = options.d_model, H = options.n_head, hd = C / H;
  Tensor qkv = c_attn->forward(x);  // (B, T, 3C)
  const std::vector<Tensor> parts = split(qkv, C, 2);  // one node: one gradient buffer for q, k, v
  auto heads = [&](int64_t which) {  // (B, T, C) slice -> (B, H, T, hd)
    return transpose(view(parts[size_t(which)], {B, T, H, hd}), 1, 2);
  };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  if (options.rotary) {
    q = rotary_embedding(q, options.rotary_base);
    k = rotary_embedding(k, options.rotary_base);
  }
  Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/true);  // (B, H, T, hd)
  y = reshape(transpose(y, 1, 2), {B, T, C});
  return resid_dropout->forward(c_proj->forward(y));
}

}  // namespace trireme::nn
