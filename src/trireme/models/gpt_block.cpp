// The GPT's decoder block (see gpt_block.h): attention and MLP over a tensor-parallel group.
#include "trireme/models/gpt_block.h"

#include "trireme/models/gpt.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/lora.h"
#include "trireme/parallel/sp_linear.h"
#include "trireme/parallel/tp_mappings.h"

namespace trireme::models {


GPTAttention::GPTAttention(const GPTConfig& c, parallel::TpGroup tp)
    : Module("MultiHeadAttention"), llama(c.arch == GPTArch::llama), d_model(c.d_model), n_head(c.n_head),
      rope_theta(c.rope_theta) {
  const int64_t d = c.d_model, h = c.n_head, kv = c.kv_heads();
  TRIREME_CHECK(d % h == 0, "GPTAttention: d_model ", d, " must be a multiple of n_head ", h);
  TRIREME_CHECK(h % kv == 0, "GPTAttention: n_head (", h, ") must be a multiple of n_kv_head (", kv, ")");
  TRIREME_CHECK(h % tp.size == 0, "tensor parallelism: n_head (", h, ") must be divisible by tp (", tp.size,
                ") so that each rank holds whole heads");
  TRIREME_CHECK(kv % tp.size == 0, "tensor parallelism: n_kv_head (", kv, ") must be divisible by tp (", tp.size,
                ") so that each rank holds whole key/value heads (they are split, not replicated)");
  n_head_local = h / tp.size;
  n_kv_head_local = kv / tp.size;
  if (llama) {
    const int64_t kv_d = kv * (d / h);
    q_proj = register_module("q_proj", std::make_shared<parallel::ColumnParallelLinear>(
                                           d, d, tp, parallel::ColumnParallelOptions{.bias = c.qkv_bias}));
    kv_proj = register_module("kv_proj", std::make_shared<parallel::ColumnParallelLinear>(
                                             d, 2 * kv_d, tp, parallel::ColumnParallelOptions{.bias = c.qkv_bias, .blocks = 2}));
  } else {
    c_attn = register_module("c_attn", std::make_shared<parallel::ColumnParallelLinear>(
                                           d, 3 * d, tp, parallel::ColumnParallelOptions{.bias = c.bias, .blocks = 3}));
  }
  c_proj = register_module("c_proj", std::make_shared<parallel::RowParallelLinear>(d, d, tp, c.bias && !llama));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor GPTAttention::qkv_weight() const { return llama ? cat({q_proj->weight, kv_proj->weight}, 0) : c_attn->weight; }

Tensor GPTAttention::qkv_bias() const {
  if (!llama) return c_attn->bias;
  return q_proj->bias.defined() ? cat({q_proj->bias, kv_proj->bias}, 0) : Tensor();
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
  if (!llama) return attend(c_attn->forward(x), /*sp=*/false, Tensor());  // (B, T, 3C): this rank's q | k | v
  // One GEMM for q | k | v, entering the tp region as ColumnParallelLinear::forward does.
  if (q_proj->lora || kv_proj->lora) return attend(cat({q_proj->forward(x), kv_proj->forward(x)}, 2), false, Tensor());
  const parallel::TpGroup& tp = q_proj->tp;
  const Tensor qkv = tp.size == 1 ? linear(x, qkv_weight(), qkv_bias())
                                  : linear(x, qkv_weight(), qkv_bias(), parallel::tp_grad_input_all_reduce(tp));
  return attend(qkv, /*sp=*/false, Tensor());
}

namespace {
// A column layer's LoRA share on the sequence-parallel path (n, out_local), or zeros without one.
Tensor column_adapter_sp(parallel::ColumnParallelLinear& layer, const Tensor& x_rows, const Tensor& a) {
  if (layer.lora) return layer.lora->forward_sp_column(x_rows, a);
  return zeros({x_rows.size(0) * layer.tp.size, layer.out_local}, layer.weight.dtype(), layer.weight.device());
}
}  // namespace

PendingSum GPTAttention::start_sp(const Tensor& x_rows, int64_t B, int64_t T, const Tensor& proj_bias,
                                  const std::vector<Tensor>& adapter_a, const Tensor& residual) {
  const parallel::TpGroup& tp = c_proj->tp;
  Tensor qkv = parallel::sp_column_parallel_linear(x_rows, qkv_weight(), qkv_bias(), tp);
  if (!llama && c_attn->lora) qkv = qkv + c_attn->lora->forward_sp_column(x_rows, adapter_a.at(0));
  if (llama && (q_proj->lora || kv_proj->lora)) {  // q | k | v: the q columns, then k | v
    qkv = qkv + cat({column_adapter_sp(*q_proj, x_rows, adapter_a.at(0)),
                     column_adapter_sp(*kv_proj, x_rows, adapter_a.at(1))}, 1);
  }
  return attend(reshape(qkv, {B, T, qkv.size(1)}), /*sp=*/true, proj_bias, residual);
}

Tensor GPTAttention::attention(const Tensor& qkv) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = n_head_local, hd = d_model / n_head, C = H * hd;
  if (!llama) {
    const std::vector<Tensor> parts = split(qkv, C, 2);  // one node: one gradient buffer for q, k, v
    auto heads = [&](int64_t which) { return transpose(view(parts[size_t(which)], {B, T, H, hd}), 1, 2); };
    const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true);  // (B, H, T, hd)
    return reshape(transpose(y, 1, 2), {B, T, C});
  }
  const int64_t KV = n_kv_head_local, group = H / KV;
  const std::vector<Tensor> parts = split(qkv, std::vector<int64_t>{C, KV * hd, KV * hd}, 2);
  auto heads = [&](const Tensor& t, int64_t n) { return transpose(view(t, {B, T, n, hd}), 1, 2); };  // (B, n, T, hd)
  // Grouped-query attention: kv head j serves q heads [j group, (j + 1) group).
  auto repeat = [&](const Tensor& t) {
    return group == 1 ? t : reshape(expand(unsqueeze(t, 2), {B, KV, group, T, hd}), {B, H, T, hd});
  };
  const Tensor q = rotary_embedding(heads(parts[0], H), rope_theta);
  const Tensor k = repeat(rotary_embedding(heads(parts[1], KV), rope_theta));
  const Tensor v = repeat(heads(parts[2], KV));
  const Tensor y = scaled_dot_product_attention(q, k, v, /*causal=*/true);  // (B, H, T, hd)
  return reshape(transpose(y, 1, 2), {B, T, C});
}

PendingSum GPTAttention::attend(const Tensor& qkv, bool sp, const Tensor& proj_bias,
                                           const Tensor& residual) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = n_head_local * (d_model / n_head);
  const Tensor y = attention(qkv);
  PendingSum p;
  if (!sp) {
    p.partial = c_proj->start(y, p.work);
    return p;
  }
  const Tensor rows = reshape(y, {B * T, C});
  const parallel::LowRankTerm adapter = c_proj->lora ? c_proj->lora->sp_row_term(rows) : parallel::LowRankTerm{};
  p.partial = parallel::sp_row_parallel_linear_start(rows, c_proj->weight, proj_bias, c_proj->tp, p.work, residual, adapter);
  return p;
}

GPTMLP::GPTMLP(const GPTConfig& c, parallel::TpGroup tp)
    : Module("MLP"), swiglu(c.arch == GPTArch::llama), gelu_approx(c.gelu) {
  const int64_t d = c.d_model, ffn = c.ffn_size();
  const bool bias = c.bias && !swiglu;
  c_fc = register_module("c_fc", std::make_shared<parallel::ColumnParallelLinear>(
                                     d, swiglu ? 2 * ffn : ffn, tp,
                                     parallel::ColumnParallelOptions{.bias = bias, .blocks = swiglu ? 2 : 1}));
  c_proj = register_module("c_proj", std::make_shared<parallel::RowParallelLinear>(ffn, d, tp, bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor GPTMLP::activation(const Tensor& h) const {
  if (!swiglu) return gelu(h, gelu_approx);
  const std::vector<Tensor> gate_up = chunk(h, 2, -1);  // this rank's gate | up columns
  return silu(gate_up[0]) * gate_up[1];
}

Tensor GPTMLP::forward(const Tensor& x) {
  PendingSum p = start(x);
  return finish(p);
}

Tensor GPTMLP::activation_recomputed_if(bool recompute, const Tensor& u) const {
  Tensor a = activation(u);
  if (recompute) {
    autograd::recompute_when_saved(a, {u}, [this](const autograd::TensorList& in) {
      return autograd::TensorList{activation(in[0])};
    });
  }
  return a;
}

PendingSum GPTMLP::start(const Tensor& x) {
  PendingSum p;
  p.partial = c_proj->start(activation_recomputed_if(recompute_activation, c_fc->forward(x)), p.work);
  return p;
}

PendingSum GPTMLP::start_sp(const Tensor& x_rows, const Tensor& proj_bias, const Tensor& adapter_a,
                            const Tensor& residual) {
  Tensor u = parallel::sp_column_parallel_linear(x_rows, c_fc->weight, c_fc->bias, c_fc->tp);
  if (c_fc->lora) u = u + c_fc->lora->forward_sp_column(x_rows, adapter_a);
  const Tensor h = activation_recomputed_if(recompute_activation, u);
  const parallel::LowRankTerm adapter = c_proj->lora ? c_proj->lora->sp_row_term(h) : parallel::LowRankTerm{};
  PendingSum p;
  p.partial = parallel::sp_row_parallel_linear_start(h, c_proj->weight, proj_bias, c_proj->tp, p.work, residual, adapter);
  return p;
}

Tensor GPTMLP::finish(PendingSum& p) { return dropout->forward(c_proj->finish(p.partial, p.work)); }

GPTBlock::GPTBlock(const GPTConfig& c, parallel::TpGroup tp)
    : Module("TransformerDecoderLayer") {
  ln_1 = register_module("ln_1", gpt_norm(c));
  attn = register_module("attn", std::make_shared<GPTAttention>(c, tp));
  ln_2 = register_module("ln_2", gpt_norm(c));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c, tp));
}

Tensor GPTBlock::norm(const GPTNorm& ln, const Tensor& x) const {
  Tensor y = ln.forward(x);
  if (selective_recompute_) {
    autograd::recompute_when_saved(y, {x, ln.weight, ln.bias}, [norm = &ln](const autograd::TensorList& in) {
      return autograd::TensorList{norm->apply(in[0], in[1], in[2])};
    });
  }
  return y;
}

Tensor GPTBlock::forward(const Tensor& x) {
  Tensor h = x + attn->forward(norm(*ln_1, x));
  return h + mlp->forward(norm(*ln_2, h));
}

std::vector<Tensor> GPTBlock::partial_grad_params() const {
  auto adapter_a = [](const std::shared_ptr<parallel::ColumnParallelLinear>& layer) {
    return layer && layer->lora ? layer->lora->A : Tensor();
  };
  return {ln_1->weight,
          ln_1->bias,
          ln_2->weight,
          ln_2->bias,
          attn->c_proj->bias,
          mlp->c_proj->bias,
          adapter_a(attn->llama ? attn->q_proj : attn->c_attn),
          adapter_a(attn->kv_proj),
          adapter_a(mlp->c_fc)};
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
    return attn->start_sp(ln_1->apply(x, p[0], p[1]), B, T, p[4], {p[6], p[7]}, residual);
  });
  return sub_layer(h, *mlp->dropout, [&](const Tensor& residual) {
    return mlp->start_sp(ln_2->apply(h, p[2], p[3]), p[5], p[8], residual);
  });
}

}  // namespace trireme::models
