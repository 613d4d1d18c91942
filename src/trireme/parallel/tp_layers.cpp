// Tensor-parallel layers (see tp_layers.h for the math).
#include "trireme/parallel/tp_layers.h"

#include <cmath>
#include <limits>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/lora.h"

namespace trireme::parallel {

using autograd::any_requires_grad;
using autograd::record;
using autograd::TensorList;

Tensor TensorParallelModule::register_shard(const std::string& name, const ShardSpec& spec, DType dtype) {
  shard_specs_[name] = spec;
  return register_parameter(name, zeros(shard_shape(spec), dtype));
}

std::map<std::string, ShardSpec> collect_shard_specs(nn::Module& root) {
  std::map<std::string, ShardSpec> out;
  for (auto& [prefix, m] : root.named_modules()) {
    auto* tpm = dynamic_cast<TensorParallelModule*>(m);
    if (!tpm) continue;
    for (const auto& [local, spec] : tpm->shard_specs()) out[nn::join_name(prefix, local)] = spec;
  }
  return out;
}

namespace {
ShardSpec spec_for(const TpGroup& tp, int dim, Shape full_shape, int64_t blocks = 1, bool pad = false) {
  ShardSpec s{.dim = dim, .size = tp.size, .rank = tp.rank, .full_shape = std::move(full_shape), .blocks = blocks,
              .pad = pad};
  s.shard_length();  // validates
  return s;
}
}  // namespace

// ---- ColumnParallelLinear ----

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, TpGroup tp_, ColumnParallelOptions o)
    : TensorParallelModule("ColumnParallelLinear"), in_features(in), out_features(out), blocks(o.blocks), tp(tp_) {
  TRIREME_CHECK(in > 0 && out > 0, "ColumnParallelLinear: features must be positive, got in=", in, " out=", out);
  ShardSpec ws = spec_for(tp, 0, {out, in}, o.blocks, o.pad);
  out_local = ws.shard_length();
  weight = register_shard("weight", ws, o.dtype);
  if (o.bias) bias = register_shard("bias", spec_for(tp, 0, {out}, o.blocks, o.pad), o.dtype);
  reset_parameters(0);
}

void ColumnParallelLinear::reset_parameters(uint64_t seed) {
  const double bound = 1.0 / std::sqrt(double(in_features));
  const std::string prefix = qualified_name();
  init_shard_uniform(weight, shard_specs().at("weight"), -bound, bound, seed, nn::join_name(prefix, "weight"));
  if (bias.defined()) {
    init_shard_uniform(bias, shard_specs().at("bias"), -bound, bound, seed, nn::join_name(prefix, "bias"));
  }
}

// linear(copy_to_tp_region(x), W_r, b_r), with copy_to_tp_region's backward (the all-reduce of
// dL/dx) started as soon as linear's backward has dL/dx and finished after dL/dW_r is queued: the
// communication overlaps the weight-gradient GEMM.
Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  const Tensor y = tp.size == 1 ? linear(x, weight, bias) : linear(x, weight, bias, tp_grad_input_all_reduce(tp));
  return lora ? y + lora->forward(x) : y;
}

void ColumnParallelLinear::add_lora(const LoraOptions& options) {
  TRIREME_CHECK(!lora, "ColumnParallelLinear ", qualified_name(), " already has a LoRA adapter");
  lora = register_module("lora", std::make_shared<LoraAdapter>(in_features, out_features, tp, LoraAdapter::Cut::column,
                                                               options, blocks, weight.dtype()));
  lora->reset_parameters(options.seed);  // now that it has its name
}

// ---- RowParallelLinear ----

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, TpGroup tp_, bool has_bias, DType dtype)
    : TensorParallelModule("RowParallelLinear"), in_features(in), out_features(out), tp(tp_) {
  TRIREME_CHECK(in > 0 && out > 0, "RowParallelLinear: features must be positive, got in=", in, " out=", out);
  ShardSpec ws = spec_for(tp, 1, {out, in});
  in_local = ws.shard_length();
  weight = register_shard("weight", ws, dtype);
  if (has_bias) bias = register_parameter("bias", zeros({out}, dtype));
  reset_parameters(0);
}

void RowParallelLinear::reset_parameters(uint64_t seed) {
  const double bound = 1.0 / std::sqrt(double(in_features));
  const std::string prefix = qualified_name();
  init_shard_uniform(weight, shard_specs().at("weight"), -bound, bound, seed, nn::join_name(prefix, "weight"));
  if (bias.defined()) nn::init_uniform(bias, -bound, bound, seed, nn::join_name(prefix, "bias"));
}

void RowParallelLinear::add_lora(const LoraOptions& options) {
  TRIREME_CHECK(!lora, "RowParallelLinear ", qualified_name(), " already has a LoRA adapter");
  lora = register_module("lora", std::make_shared<LoraAdapter>(in_features, out_features, tp, LoraAdapter::Cut::row,
                                                               options, 1, weight.dtype()));
  lora->reset_parameters(options.seed);  // now that it has its name
}

Tensor RowParallelLinear::forward(const Tensor& x) const {
  if (tp.size == 1 && !lora) return linear(x, weight, bias);  // nothing to sum: the bias in the GEMM's epilogue
  dist::WorkPtr work;
  Tensor y = start(x, work);
  return finish(y, work);
}

Tensor RowParallelLinear::start(const Tensor& x, dist::WorkPtr& work) const {
  TRIREME_CHECK(x.dim() >= 1 && x.size(-1) == in_local, "RowParallelLinear: input ", x.sizes(),
                " must end in this rank's ", in_local, " of ", in_features, " input features");
  work = nullptr;
  if (lora) {
    // The adapter's share joins the partial sum before the reduce (the bias still once, after).
    const Tensor partial = linear(x, weight, tp.size == 1 ? bias : Tensor()) + lora->forward(x);
    return tp.size == 1 ? partial : start_reduce_from_tp_region_owned(partial, tp, work);
  }
  if (tp.size == 1) return linear(x, weight, bias);  // nothing to sum: the bias in the GEMM's epilogue
  return start_reduce_from_tp_region_owned(linear(x, weight), tp, work);
}

Tensor RowParallelLinear::finish(const Tensor& y, const dist::WorkPtr& work) const {
  if (work) work->wait();
  if (tp.size == 1) return y;  // start() added the bias
  return bias.defined() ? y + bias : y;  // the replicated bias once, after the sum
}

// ---- VocabParallelEmbedding ----

VocabShard VocabShard::of(const ShardSpec& spec) {
  const int64_t L = spec.shard_length(), start = int64_t(spec.rank) * L;
  return {start, std::max<int64_t>(0, std::min(L, spec.full_length() - start)), spec.full_length()};
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t n, int64_t d, TpGroup tp_, DType dtype)
    : TensorParallelModule("VocabParallelEmbedding"), num_embeddings(n), dim(d), tp(tp_) {
  TRIREME_CHECK(n > 0 && d > 0, "VocabParallelEmbedding: sizes must be positive, got ", n, " x ", d);
  ShardSpec ws = spec_for(tp, 0, {n, d}, 1, /*pad=*/true);
  VocabShard vs = VocabShard::of(ws);
  vocab_start = vs.start;
  vocab_real = vs.real;
  weight = register_shard("weight", ws, dtype);
  reset_parameters(0);
}

void VocabParallelEmbedding::reset_parameters(uint64_t seed) {
  init_shard_normal(weight, shard_specs().at("weight"), 1.0, seed, nn::join_name(qualified_name(), "weight"));
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  if (tp.size == 1) return embedding(weight, ids);
  return reduce_from_tp_region(forward_partial(ids), tp);
}

Tensor VocabParallelEmbedding::forward_partial(const Tensor& ids) const {
  TRIREME_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
                "VocabParallelEmbedding: ids must be integers, got ", ids.str());
  if (tp.size == 1) return embedding(weight, ids);
  Tensor local = add(to_dtype(ids, DType::i64), double(-vocab_start));
  // Ids this rank does not own look up row 0 and are then zeroed.
  Tensor mine = mul(to_dtype(gt(local, -1.0), weight.dtype()), to_dtype(lt(local, double(vocab_real)), weight.dtype()));
  Tensor safe = where(gt(mine, 0.0), local, zeros_like(local));
  return embedding(weight, safe) * unsqueeze(mine, -1);
}

// ---- vocab-parallel cross-entropy: parallel/vocab_parallel_loss.cpp ----

// ---- dropout of a shard ----

Tensor tp_dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, int64_t full_last_dim,
                  int64_t column_offset, uint64_t offset) {
  if (!training || p == 0.0) return x;
  const int64_t w = x.dim() ? x.size(-1) : 1;
  TRIREME_CHECK(column_offset >= 0 && column_offset + w <= full_last_dim, "tp_dropout: columns [", column_offset,
                ", ", column_offset + w, ") do not fit in a last dim of ", full_last_dim);
  if (column_offset == 0 && w == full_last_dim) return dropout(x, p, training, seed, stream, offset);
  // The full tensor's mask, then this shard's columns: the same draws as the single process.
  Tensor mask;
  {
    NoGradGuard no_grad;
    const int64_t rows = x.numel() / std::max<int64_t>(w, 1);
    Tensor full_mask = dropout(ones({rows, full_last_dim}, x.dtype(), x.device()), p, true, seed, stream, offset);
    mask = reshape(contiguous(narrow(full_mask, 1, column_offset, w)), x.sizes());
  }
  return x * mask;
}

}  // namespace trireme::parallel
