// TransformerDecoderLayer (pre-LN block).
#include "trireme/nn/decoder_layer.h"

namespace trireme::nn {

TransformerDecoderLayer::TransformerDecoderLayer(const DecoderLayerOptions& o) : Module("TransformerDecoderLayer") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(o.d_model, o.ln_eps, o.bias, o.dtype));
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(AttentionOptions{
                                      .d_model = o.d_model,
                                      .n_head = o.n_head,
                                      .bias = o.bias,
                                      .dropout = o.dropout,
                                      .rotary = o.rotary,
                                      .dtype = o.dtype}));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(o.d_model, o.ln_eps, o.bias, o.dtype));
  mlp = register_module("mlp", std::make_shared<MLP>(o.d_model, o.mlp_hidden, o.bias, o.dropout, o.gelu, o.dtype));
}

Tensor TransformerDecoderLayer::forward(const Tensor& x) {
  Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

}  // namespace trireme::nn
