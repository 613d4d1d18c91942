// Tensor-parallel layers (see tp_layers.h for the math).
#include "trireme/parallel/tp_layers.h"

#include <cmath>
#include <limits>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/nn/init.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

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
    : TensorParallelModule("ColumnParallelLinear"), in_features(in), out_features(out), tp(tp_) {
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

Tensor ColumnParallelLinear::forward(const Tensor& x) const { return linear(copy_to_tp_region(x, tp), weight, bias); }

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

Tensor RowParallelLinear::forward(const Tensor& x) const {
  TRIREME_CHECK(x.dim() >= 1 && x.size(-1) == in_local, "RowParallelLinear: input ", x.sizes(),
                " must end in this rank's ", in_local, " of ", in_features, " input features");
  Tensor y = reduce_from_tp_region(linear(x, weight), tp);
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
  TRIREME_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
                "VocabParallelEmbedding: ids must be integers, got ", ids.str());
  if (tp.size == 1) return embedding(weight, ids);
  Tensor local = add(to_dtype(ids, DType::i64), double(-vocab_start));
  // Ids this rank does not own look up row 0 and are then zeroed.
  Tensor mine = mul(to_dtype(gt(local, -1.0), weight.dtype()), to_dtype(lt(local, double(vocab_real)), weight.dtype()));
  Tensor safe = where(gt(mine, 0.0), local, zeros_like(local));
  Tensor rows = embedding(weight, safe) * unsqueeze(mine, -1);
  return reduce_from_tp_region(rows, tp);
}

// ---- vocab-parallel cross-entropy ----

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const VocabShard& shard,
                                    const TpGroup& tp, int64_t ignore_index) {
  // A loss runs in f32 under autocast (Note [autocast policy]).
  if (auto c = autocast_f32_args({logits})) return vocab_parallel_cross_entropy((*c)[0], targets, shard, tp, ignore_index);
  TRIREME_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "vocab_parallel_cross_entropy: logits ", logits.sizes(), " must be (N, V_local) and targets ",
                targets.sizes(), " (N)");
  TRIREME_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
                "vocab_parallel_cross_entropy: targets must be integers, got ", targets.str());
  TRIREME_CHECK(shard.real >= 0 && shard.real <= logits.size(1), "vocab_parallel_cross_entropy: ", shard.real,
                " real columns of ", logits.sizes());
  const int64_t N = logits.size(0), Vl = logits.size(1);
  Tensor probs, onehot, scale;  // saved for backward: softmax and target indicator on the real columns
  Tensor loss;
  {
    NoGradGuard no_grad;
    Tensor l = to_dtype(logits.detach(), DType::f32);
    Tensor real = narrow(l, 1, 0, shard.real);  // padding columns never count
    // Row max over the full vocabulary (a rank with no real columns contributes -inf).
    Tensor row_max = shard.real > 0 ? contiguous(max(real, 1).first)
                                    : full({N}, -std::numeric_limits<double>::infinity(), DType::f32, l.device());
    tp_all_reduce_(row_max, tp, dist::ReduceOp::max);
    Tensor shifted = real - unsqueeze(row_max, 1);  // (N, real)
    Tensor e = exp(shifted);
    Tensor local_t = add(to_dtype(targets, DType::i64), double(-shard.start));
    onehot = to_dtype(eq(unsqueeze(arange(shard.real, DType::i64, l.device()), 0), unsqueeze(local_t, 1)), DType::f32);
    // One all-reduce for both sums: row 0 = sum of exponentials, row 1 = the target's shifted logit.
    Tensor sums = contiguous(stack({sum(e, {1}), sum(shifted * onehot, {1})}, 0));  // (2, N)
    tp_all_reduce_(sums, tp, dist::ReduceOp::sum);
    Tensor sum_exp = narrow(sums, 0, 0, 1).detach(), target_shifted = narrow(sums, 0, 1, 1).detach();
    Tensor valid = to_dtype(ne(to_dtype(targets, DType::i64), scalar_tensor(double(ignore_index), DType::i64, l.device())),
                            DType::f32);  // (N)
    // The number of counted targets stays a tensor (no host sync on a GPU); clamped to 1 so
    // that no counted target gives a zero loss and zero gradient (valid is all zeros then).
    Tensor count = maximum(sum(valid), scalar_tensor(1.0, DType::f32, l.device()));
    // Targets outside the vocabulary are errors, as in cross_entropy (checked on the host copy).
    if (targets.device().is_cpu()) {
      Tensor t64 = contiguous(to_dtype(targets, DType::i64));
      const int64_t* t = t64.data<int64_t>();
      for (int64_t i = 0; i < N; ++i) {
        TRIREME_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < shard.vocab_size),
                      "vocab_parallel_cross_entropy: target ", t[i], " at row ", i, " is outside the vocabulary");
      }
    }
    Tensor per_row = (log(squeeze(sum_exp, 0)) - squeeze(target_shifted, 0)) * valid;  // (N)
    loss = sum(per_row) / count;
    probs = e / reshape(sum_exp, {N, 1});
    scale = valid / count;  // d loss / d per-row loss
  }
  loss = to_dtype(loss, logits.dtype());
  if (any_requires_grad({&logits})) {
    record("vocab_parallel_cross_entropy", {&logits}, {&loss},
           [probs, onehot, scale, Vl, real = shard.real, dtype = logits.dtype()](const TensorList& g) -> TensorList {
             Tensor d = (probs - onehot) * unsqueeze(scale * to_dtype(g[0], DType::f32), 1);  // (N, real)
             if (real < Vl) d = cat({d, zeros({d.size(0), Vl - real}, DType::f32, d.device())}, 1);
             return {to_dtype(d, dtype)};
           });
  }
  return loss;
}

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
