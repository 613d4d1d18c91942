// LoRA adapters on tensor-parallel layers (see lora.h for the cuts and their collectives).
#include "trireme/parallel/lora.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"

namespace trireme::parallel {

LoraAdapter::LoraAdapter(int64_t in, int64_t out, TpGroup tp_, Cut cut_, LoraOptions o, int64_t out_blocks,
                         DType dtype)
    : TensorParallelModule("LoraAdapter"), in_features(in), out_features(out), tp(tp_), cut(cut_), options(o) {
  TRIREME_CHECK(o.rank > 0, "LoRA: the rank must be positive, got ", o.rank);
  TRIREME_CHECK(o.dropout >= 0 && o.dropout < 1, "LoRA: dropout must be in [0, 1), got ", o.dropout);
  const int64_t r = o.rank;
  if (cut == Cut::column) {
    A = register_parameter("A", zeros({r, in}, dtype));
    ShardSpec bs{.dim = 0, .size = tp.size, .rank = tp.rank, .full_shape = {out, r}, .blocks = out_blocks};
    bs.shard_length();  // validates
    B = register_shard("B", bs, dtype);
  } else {
    ShardSpec as{.dim = 1, .size = tp.size, .rank = tp.rank, .full_shape = {r, in}};
    as.shard_length();
    A = register_shard("A", as, dtype);
    B = register_parameter("B", zeros({out, r}, dtype));
  }
  reset_parameters(0);
}

void LoraAdapter::reset_parameters(uint64_t seed) {
  const double bound = 1.0 / std::sqrt(double(in_features));
  const std::string name = nn::join_name(qualified_name(), "A");
  auto spec = shard_specs().find("A");
  if (spec != shard_specs().end()) {
    init_shard_uniform(A, spec->second, -bound, bound, seed, name);
  } else {
    nn::init_uniform(A, -bound, bound, seed, name);
  }
  nn::init_constant(B, 0.0);
}

Tensor LoraAdapter::dropped(const Tensor& x, std::optional<int64_t> first_row) {
  if (!is_training() || options.dropout == 0) return x;
  // As nn::Dropout: one draw per call outside a GlobalRowScope, the scope's counter inside one.
  const uint64_t counter = first_row ? peek_rng_counter() : next_rng_counter();
  const uint64_t stream = nn::dropout_stream(qualified_name(), counter);
  nn::bind_dropout_stream(*this, counter, /*advances=*/!first_row, stream);  // a traced step replays the draw
  const int64_t local = x.size(-1), full_width = cut == Cut::row ? in_features : local;
  const int64_t row_numel = x.dim() > 0 && x.size(0) > 0 ? x.numel() / x.size(0) / local * full_width : 0;
  const uint64_t offset = uint64_t(first_row.value_or(0)) * uint64_t(row_numel);
  return tp_dropout(x, options.dropout, true, rng_seed(), stream, full_width,
                    cut == Cut::row ? int64_t(tp.rank) * local : 0, offset);
}

Tensor LoraAdapter::forward(const Tensor& x) {
  const Tensor in = dropped(x, nn::GlobalRowScope::current());
  const double scale = options.scale();
  if (cut == Cut::column) {
    const Tensor u = copy_to_tp_region(linear(in, A), tp);  // (..., r), whole on every rank
    return linear(u, B) * scale;
  }
  const Tensor b = sum_grads_over_tp({B}, tp)[0];  // B's gradient is partial on each rank
  return linear(linear(in, A), b) * scale;
}

Tensor LoraAdapter::forward_sp_column(const Tensor& x_rows, const Tensor& a) {
  TRIREME_CHECK(cut == Cut::column && x_rows.dim() == 2, "LoraAdapter::forward_sp_column: a column adapter's "
                "token rows (n/tp, in), got ", x_rows.sizes());
  // The scale on u, the narrowest tensor of the adapter.
  const Tensor u_rows = linear(dropped(x_rows, nn::GlobalRowScope::current()), a) * options.scale();
  return linear(gather_rows_from_sp(contiguous(u_rows), tp), B);
}

LowRankTerm LoraAdapter::sp_row_term(const Tensor& x) {
  TRIREME_CHECK(cut == Cut::row && x.dim() == 2 && x.size(0) % tp.size == 0, "LoraAdapter::sp_row_term: a row "
                "adapter's every token row (n, in_local), n divisible by tp = ", tp.size, ", got ", x.sizes());
  // x holds every rank's rows, the scope counts from this rank's: shift it to the first of all.
  std::optional<int64_t> first_row = nn::GlobalRowScope::current();
  if (first_row) *first_row -= int64_t(tp.rank) * (x.size(0) / tp.size);
  const Tensor u = linear(dropped(x, first_row), A) * options.scale();
  return {u, sum_grads_over_tp({B}, tp)[0]};  // B's gradient is partial on each rank
}

Tensor LoraAdapter::weight_delta() const {
  NoGradGuard no_grad;
  return matmul(B, A) * options.scale();
}

}  // namespace trireme::parallel
