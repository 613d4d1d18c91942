// The GPT's decoder block (see gpt_block.h): attention and MLP over a tensor-parallel group.
#include "trireme/models/gpt_block.h"

#include "trireme/models/gpt.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/sp_linear.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::models {


GPTAttention::GPTAttention(int64_t d, int64_t h, bool bias, double p, parallel::TpGroup tp)
    : Module("MultiHeadAttention"), d_model(d), n_head(h) {
  TRIREME_CHECK(d % h == 0, "GPTAttention: d_model ", d, " must be a multiple of n_head ", h);
  TRIREME_CHECK(h % tp.size == 0, "tensor parallelism: n_head (", h, ") must be divisible by tp (", tp.size,
                ") so that each rank holds whole heads");
  n_head_local = h / tp.size;
  c_attn = register_module("c_attn", std::make_shared<parallel::ColumnParallelLinear>(
                                         d, 3 * d, tp, parallel::ColumnParallelOptions{.bias = bias, .blocks = 3}));
  c_proj = register_module("c_proj", std::make_shared<parallel::RowParallelLinear>(d, d, tp, bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(p));
}

Tensor GPTAttention::forward(const Tensor& x) {
  PendingSum p = start(x);
  return finish(p);
}

Tensor GPTAttention::finish(PendingSum& p) {
  return resid_dropout->forward(c_proj->finish(p.partial, p.work));
}

PendingSum GPTAttention::start(const Tensor& x) {
  TRIREME_CHECK(x.dim() == 3 && x.size(2) == d_model, "GPTAttention: expected input (B, T, ", d_model,
                "), got ", x.sizes());
  return attend(c_attn->forward(x), /*sp=*/false, Tensor());  // (B, T, 3C): this rank's q | k | v
}

PendingSum GPTAttention::start_sp(const Tensor& x_rows, int64_t B, int64_t T, const Tensor& proj_bias,
                                             const Tensor& residual) {
  const parallel::TpGroup& tp = c_attn->tp;
  const Tensor qkv = parallel::sp_column_parallel_linear(x_rows, c_attn->weight, c_attn->bias, tp);
  return attend(reshape(qkv, {B, T, qkv.size(1)}), /*sp=*/true, proj_bias, residual);
}

Tensor GPTAttention::attention(const Tensor& qkv) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = n_head_local, hd = d_model / n_head, C = H * hd;
  const std::vector<Tensor> parts = split(qkv, C, 2);  // one node: one gradient buffer for q, k, v
  auto heads = [&](int64_t which) { return transpose(view(parts[size_t(which)], {B, T, H, hd}), 1, 2); };
  const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true);  // (B, H, T, hd)
  return reshape(transpose(y, 1, 2), {B, T, C});
}

PendingSum GPTAttention::attend(const Tensor& qkv, bool sp, const Tensor& proj_bias,
                                           const Tensor& residual) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = n_head_local * (d_model / n_head);
  const Tensor y = attention(qkv);
  PendingSum p;
  p.partial = sp ? parallel::sp_row_parallel_linear_start(reshape(y, {B * T, C}), c_proj->weight, proj_bias, c_proj->tp, p.work,
                                                residual)
                 : c_proj->start(y, p.work);
  return p;
}

GPTMLP::GPTMLP(int64_t d, bool bias, double p, GeluApprox gelu, parallel::TpGroup tp)
    : Module("MLP"), gelu_approx(gelu) {
  c_fc = register_module("c_fc", std::make_shared<parallel::ColumnParallelLinear>(d, 4 * d, tp, parallel::ColumnParallelOptions{.bias = bias}));
  c_proj = register_module("c_proj", std::make_shared<parallel::RowParallelLinear>(4 * d, d, tp, bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
}

Tensor GPTMLP::forward(const Tensor& x) {
  PendingSum p = start(x);
  return finish(p);
}

namespace {
Tensor gelu_recomputed_if(bool recompute, const Tensor& u, GeluApprox approx) {
  Tensor a = gelu(u, approx);
  if (recompute) {
    autograd::recompute_when_saved(a, {u}, [approx](const autograd::TensorList& in) {
      return autograd::TensorList{gelu(in[0], approx)};
    });
  }
  return a;
}
}  // namespace

PendingSum GPTMLP::start(const Tensor& x) {
  PendingSum p;
  p.partial = c_proj->start(gelu_recomputed_if(recompute_gelu, c_fc->forward(x), gelu_approx), p.work);
  return p;
}

PendingSum GPTMLP::start_sp(const Tensor& x_rows, const Tensor& proj_bias, const Tensor& residual) {
  const Tensor h = gelu_recomputed_if(
      recompute_gelu, parallel::sp_column_parallel_linear(x_rows, c_fc->weight, c_fc->bias, c_fc->tp), gelu_approx);
  PendingSum p;
  p.partial = parallel::sp_row_parallel_linear_start(h, c_proj->weight, proj_bias, c_proj->tp, p.work, residual);
  return p;
}

Tensor GPTMLP::finish(PendingSum& p) { return dropout->forward(c_proj->finish(p.partial, p.work)); }

GPTBlock::GPTBlock(const GPTConfig& c, parallel::TpGroup tp)
    : Module("TransformerDecoderLayer") {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
  attn = register_module("attn", std::make_shared<GPTAttention>(c.d_model, c.n_head, c.bias, c.dropout, tp));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.d_model, c.ln_eps, c.bias));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c.d_model, c.bias, c.dropout, c.gelu, tp));
}

Tensor GPTBlock::norm(const nn::LayerNorm& ln, const Tensor& x) const {
  Tensor y = ln.forward(x);
  if (selective_recompute_) {
    autograd::recompute_when_saved(y, {x, ln.weight, ln.bias}, [eps = ln.eps](const autograd::TensorList& in) {
      return autograd::TensorList{layer_norm(in[0], in[1], in[2], eps)};
    });
  }
  return y;
}

Tensor GPTBlock::forward(const Tensor& x) {
  Tensor h = x + attn->forward(norm(*ln_1, x));
  return h + mlp->forward(norm(*ln_2, h));
}

std::vector<Tensor> GPTBlock::partial_grad_params() const {
  return {ln_1->weight, ln_1->bias, ln_2->weight, ln_2->bias, attn->c_proj->bias, mlp->c_proj->bias};
}

Tensor GPTBlock::forward_sp(const Tensor& x, int64_t B, int64_t T, bool sum_grads) {
  const std::vector<Tensor> p =
      sum_grads ? parallel::sum_grads_over_tp(partial_grad_params(), attn->c_proj->tp) : partial_grad_params();
  // The sum scattered to this rank's rows with the bias added, then dropout on those rows, then
  // the skip connection. When the dropout does nothing, the reduce-scatter's sum adds the skip
  // connection in its own pass (parallel::sp_row_parallel_linear_start's residual).
  auto sub_layer = [](const Tensor& skip, nn::Dropout& drop, auto&& start) {
    const bool fuse = drop.is_identity();
    PendingSum s = start(fuse ? skip : Tensor());
    if (s.work) s.work->wait();
    return fuse ? s.partial : skip + drop.forward(s.partial);
  };
  Tensor h = sub_layer(x, *attn->resid_dropout, [&](const Tensor& residual) {
    return attn->start_sp(layer_norm(x, p[0], p[1], ln_1->eps), B, T, p[4], residual);
  });
  return sub_layer(h, *mlp->dropout, [&](const Tensor& residual) {
    return mlp->start_sp(layer_norm(h, p[2], p[3], ln_2->eps), p[5], residual);
  });
}

}  // namespace trireme::models
