// Sequence parallelism's linear layers, each GEMM split by source rows (Note [split by source rows]).
#include "trireme/parallel/sp_linear.h"

#include <functional>
#include <string>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

dist::ProcessGroup& group_of(const TpGroup& tp, const char* op) {
  TRIREME_CHECK(tp.size > 1 && tp.group != nullptr && tp.group->size() == tp.size, op,
                ": needs a tensor-parallel group of ", tp.size, " ranks");
  return *tp.group;
}

// Rows [first, first + count) of a contiguous 2-D tensor, as a contiguous view.
Tensor row_range(const Tensor& t, int64_t first, int64_t count) {
  const int64_t cols = t.size(1);
  return t.alias({count, cols}, {cols, 1}, t.offset() + first * cols);
}

// Row block q (of `rows` rows) of a contiguous 2-D tensor.
Tensor rows_of(const Tensor& t, int q, int64_t rows) { return row_range(t, int64_t(q) * rows, rows); }

// Note [sending in parts]
// The row-parallel forward sends another rank's block while it computes its own; the transfer
// hides only when its own block's GEMM takes longer than the block's trip (the MLP projection of
// GPT 1.3B at tp=2 does, the attention projection does not). Sending a block in parts, each
// leaving once written, was measured slower on 2 H200s (docs/PERFORMANCE.md, "Tried and not kept": the quarter-size
// GEMMs run less efficiently and each part costs an op and an event hop), so a block goes whole.

// out = a · b (+ bias on every row), into out's memory (a contiguous view).
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor out) {
  find_kernel<MatmulKernel>("matmul", a.device(), a.dtype())(a, b, bias, out);
}

// Wᵀ of a (out, in) weight as an (in, out) operand, without a copy.
Tensor transposed(const Tensor& w) { return w.alias({w.size(1), w.size(0)}, {w.stride(1), w.stride(0)}, w.offset()); }

// out (n, cols) = every rank's rows times b (+ bias): this rank's rows first (`mine`, already
// here), each other rank's as it arrives, read where it lands (Note [staged all-gather]).
// `kept` receives, beside those GEMMs, the other ranks' rows (in rank order without this rank's;
// Note [the weight gradient by source]); the returned work says when it has them.
dist::WorkPtr product_by_source(const Tensor& mine, const Tensor& kept, const Tensor& b, const Tensor& bias,
                                const TpGroup& tp, dist::ProcessGroup& group, Tensor& out) {
  std::unique_ptr<dist::StagedAllGather> gather = dist::record_all_gather_staged(group, Tensor(), mine);
  gather->keep_others(kept);
  const int64_t rows = mine.size(0);
  gemm_into(mine, b, bias, rows_of(out, tp.rank, rows));
  for (int step = 1; step < tp.size; ++step) {
    const int q = (tp.rank + step) % tp.size;
    gemm_into(gather->arrived(q), b, bias, rows_of(out, q, rows));
  }
  return gather->finish();
}

// Note [the weight gradient by source]
// The column-parallel weight gradient needs every rank's input rows: gW = sum over q of
// g_qᵀ x_q. This rank's own rows are its input, so the forward keeps only the other ranks'
// (copied out of the staging memory beside its GEMMs) and the backward sums by source with
// addmm_: at tp = 2 half the device copies of keeping the whole gathered input, the same memory.
// Keeping the whole gathered input for one GEMM instead measured no faster on 2 H200s.

// Index of rank q's rows among the other ranks' (rank order without `me`).
int64_t other_index(int q, int me) { return q < me ? q : q - 1; }

// Note [the input gradient's sum in the GEMM]
// The column-parallel backward reduce-scatters its input gradient gx = g · W (n rows, each rank
// keeping its own rows summed over tp). As a plain reduce-scatter beside the weight-gradient GEMM
// the copy-engine group sums on its own stream: sum kernels beside the GEMMs, on the SMs they
// want, and a pass over the result in HBM. Instead the GEMM
// is split by destination rows: the other ranks' rows first, each sent once written
// (StagedReduceScatter), then the weight-gradient GEMMs while they travel, then this rank's rows
// as gx = others' sum + g_own · W, the sum read as the GEMM's C operand (addmm_into): no sum
// kernel, no pass over the result. With two ranks the others' sum is the peer's block where it
// landed. (A sum on the compute stream after the weight gradient, the same split without the
// GEMM's C operand, measured slower than the group's sums.)

// A contiguous gradient of `shape` from what an autograd node received (zeros when none came).
Tensor contiguous_grad(const Tensor& g, const Shape& shape, const Tensor& like) {
  return g.defined() ? contiguous(g) : zeros(shape, like.dtype(), like.device());
}

// The column-parallel layer: out (n, out_local) computed by source row block.
Tensor column_parallel(const Tensor& x_rows, const Tensor& weight, const Tensor& bias, const TpGroup& tp) {
  if (auto c = autocast_low_args({x_rows, weight, bias}))  // Note [autocast policy]
    return column_parallel((*c)[0], (*c)[1], (*c)[2], tp);
  TRIREME_CHECK(x_rows.dim() == 2 && weight.dim() == 2 && x_rows.size(1) == weight.size(1),
                "sp_column_parallel_linear: rows ", x_rows.sizes(), " and weight ", weight.sizes(), " do not match");
  dist::ProcessGroup& group = group_of(tp, "sp_column_parallel_linear");
  const int64_t rows = x_rows.size(0), in = weight.size(1), out_features = weight.size(0), n = rows * tp.size;
  Tensor out = Tensor::empty({n, out_features}, x_rows.dtype(), x_rows.device());
  // The other ranks' input rows, kept for the weight gradient (Note [the weight gradient by source]).
  Tensor kept = Tensor::empty({n - rows, in}, x_rows.dtype(), x_rows.device());
  dist::WorkPtr kept_ready;
  {
    NoGradGuard no_grad;
    kept_ready = product_by_source(contiguous(x_rows.detach()), kept, transposed(weight.detach()),
                                   bias.defined() ? bias.detach() : Tensor(), tp, group, out);
  }
  if (!any_requires_grad({&x_rows, &weight, &bias})) return out;
  const bool need_x = x_rows.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  SavedTensor sw(need_x ? weight : Tensor()), sx(x_rows);
  record("sp_column_parallel_linear", std::vector<Tensor>{x_rows, weight, bias}, {&out},
         [=](const TensorList& g) -> TensorList {
           NoGradGuard no_grad;
           // The output gradient's rows by source rank.
           const Tensor whole = contiguous_grad(g[0], {n, out_features}, kept);
           std::vector<Tensor> go(size_t(tp.size));
           for (int q = 0; q < tp.size; ++q) go[size_t(q)] = rows_of(whole, q, rows);
           Tensor gx, gw, gb;
           std::unique_ptr<dist::StagedReduceScatter> staged;
           const Tensor w = need_x ? sw.unpack("sp_column_parallel_linear") : Tensor();
           if (need_x) {  // (g · W) summed over tp, this rank's rows: beside the dW GEMM
             dist::ProcessGroup& grp = group_of(tp, "sp_column_parallel_linear backward");
             gx = Tensor::empty({rows, in}, kept.dtype(), kept.device());
             const Tensor gx_full = Tensor::empty({n, in}, kept.dtype(), kept.device());
             // Note [the input gradient's sum in the GEMM]: the others' rows only
             staged = dist::record_reduce_scatter_staged(grp, gx, gx_full);
             for (int step = 1; step < tp.size; ++step) {
               const int q = (tp.rank + step) % tp.size;
               gemm_into(go[size_t(q)], w, Tensor(), rows_of(gx_full, q, rows));
               staged->chunk_written(q);
             }
           }
           kept_ready->wait();
           // gW = sum over q of g_qᵀ x_q, this rank's x_q its own input.
           gw = matmul(transpose(go[size_t(tp.rank)], 0, 1), contiguous(sx.unpack("sp_column_parallel_linear")));
           for (int q = 0; q < tp.size; ++q) {
             if (q == tp.rank) continue;
             addmm_(gw, transpose(go[size_t(q)], 0, 1), rows_of(kept, int(other_index(q, tp.rank)), rows));
           }
           if (need_b) gb = sum(whole, {0});
           if (staged) {  // this rank's rows last: the others' sum read as the GEMM's C operand
             addmm_into(gx, staged->others_sum(), go[size_t(tp.rank)], w);
             staged->finish();  // frees the staging memory after that read; nothing here waits for it
           }
           return {gx, gw, gb};
         });
  return out;
}

// The row-parallel layer; x_block(q) gives rank q's rows of its input, asked for in the order of
// the GEMMs that read them.
Tensor row_parallel_start(const std::function<Tensor(int)>& x_block, int64_t rows, const Tensor& weight,
                          const Tensor& bias, const TpGroup& tp, dist::WorkPtr& work, const Tensor& residual,
                          const LowRankTerm& low_rank) {
  // Note [autocast policy]; each block is cast as it comes
  if (auto c = autocast_low_args({weight, bias, low_rank.u, low_rank.b})) {
    return row_parallel_start(x_block, rows, (*c)[0], (*c)[1], tp, work, residual, LowRankTerm{(*c)[2], (*c)[3]});
  }
  auto block = [&](int q) {
    Tensor b = x_block(q);
    if (auto c = autocast_low_args({b})) b = (*c)[0];
    TRIREME_CHECK(b.dim() == 2 && b.size(0) == rows && b.size(1) == weight.size(1) && b.dtype() == weight.dtype(),
                  "sp_row_parallel_linear: rank ", q, "'s rows of the input ", b.sizes(), " ", b.dtype(),
                  " do not match the weight ", weight.sizes(), " ", weight.dtype(), " (expected [", rows, ", ",
                  weight.size(1), "])");
    return b;
  };
  dist::ProcessGroup& group = group_of(tp, "sp_row_parallel_linear");
  const int64_t n = rows * tp.size, out_features = weight.size(0), in_local = weight.size(1);
  if (low_rank.defined()) {
    const Tensor &u = low_rank.u, &b = low_rank.b;
    TRIREME_CHECK(u.dim() == 2 && b.dim() == 2 && u.size(0) == n && b.size(0) == out_features && u.size(1) == b.size(1) &&
                      u.dtype() == weight.dtype() && b.dtype() == weight.dtype(),
                  "sp_row_parallel_linear: the low-rank term u ", u.sizes(), " ", u.dtype(), " and b ", b.sizes(), " ",
                  b.dtype(), " do not fit the output [", n, ", ", out_features, "] ", weight.dtype());
  }
  if (residual.defined()) {
    TRIREME_CHECK(residual.dim() == 2 && residual.size(0) == rows && residual.size(1) == out_features, "sp_row_parallel_linear: the residual ",
                  residual.sizes(), " must be this rank's rows of the output, [", rows, ", ", out_features, "]");
    if (residual.dtype() != weight.dtype()) {  // autocast: a wider residual stream takes a separate add
      Tensor out = row_parallel_start(x_block, rows, weight, bias, tp, work, Tensor(), low_rank);
      if (work) work->wait();
      return residual + out;
    }
  }
  Tensor mine = Tensor::empty({rows, out_features}, weight.dtype(), weight.device());
  std::vector<Tensor> xs(size_t(tp.size));
  {
    Tensor partial = Tensor::empty({n, out_features}, weight.dtype(), weight.device());
    const Tensor wt = transposed(weight.detach());
    const Tensor lr_u = low_rank.defined() ? contiguous(low_rank.u.detach()) : Tensor();
    const Tensor lr_bt = low_rank.defined() ? transposed(low_rank.b.detach()) : Tensor();
    // Split by destination rows: the other ranks' rows first, sent while this rank's compute.
    // (Split on every backend, so that the CPU tests run the GPU's code; a backend that cannot
    // send early loses only the difference between one GEMM and tp of 1/tp the rows.) No
    // collective of the group may come between here and finish(): x_block runs none.
    std::unique_ptr<dist::StagedReduceScatter> scatter = dist::record_reduce_scatter_staged(group, mine, partial);
    for (int step = 1; step <= tp.size; ++step) {
      const int q = (tp.rank + step) % tp.size;  // this rank's own rows last
      xs[size_t(q)] = block(q);                  // recorded by autograd like any op of the caller's
      NoGradGuard no_grad;
      const Tensor xq = contiguous(xs[size_t(q)].detach());
      Tensor block_q = rows_of(partial, q, rows);
      gemm_into(xq, wt, Tensor(), block_q);
      if (lr_u.defined()) addmm_(block_q, rows_of(lr_u, q, rows), lr_bt);  // before the block leaves
      if (q != tp.rank) scatter->chunk_written(q);  // Note [sending in parts]: the block goes whole
    }
    NoGradGuard no_grad;
    const Tensor b = bias.defined() ? contiguous(bias.detach()) : Tensor();
    const Tensor r = residual.defined() ? contiguous(residual.detach()) : Tensor();
    // The bias and the residual added in the sum's pass where the group can (the same bits).
    const bool fused = scatter->adds_bias();
    work = scatter->finish(fused ? b : Tensor(), fused ? r : Tensor());
    if (!fused && (b.defined() || r.defined())) {
      work->wait();
      if (b.defined()) add_(mine, b);
      if (r.defined()) add_(mine, r);
    }
  }
  std::vector<Tensor> inputs = xs;
  inputs.insert(inputs.end(), {weight, bias, residual, low_rank.u, low_rank.b});
  if (!any_requires_grad(inputs)) return mine;
  bool need_x = false;
  for (const Tensor& x : xs) need_x = need_x || x.requires_grad();
  const bool need_w = weight.requires_grad(), need_b = bias.defined() && bias.requires_grad();
  const bool need_r = residual.defined() && residual.requires_grad();
  const bool need_u = low_rank.defined() && low_rank.u.requires_grad();
  const bool need_lb = low_rank.defined() && low_rank.b.requires_grad();
  SavedTensor su(need_lb ? low_rank.u : Tensor()), slb(need_u ? low_rank.b : Tensor());
  std::vector<SavedTensor> sx;
  for (const Tensor& x : xs) sx.emplace_back(need_w ? x : Tensor());
  SavedTensor sw(need_x ? weight : Tensor());
  record("sp_row_parallel_linear", inputs, {&mine}, [=](const TensorList& g) -> TensorList {
    NoGradGuard no_grad;
    const Tensor g_rows = contiguous(g[0]);
    // Every rank's rows of g by source, this rank's first, the others' read where they land
    // (Note [split by source rows]): gx's row block q = g_q W and gW = sum over q of g_qᵀ x_q,
    // so this rank's part of both runs while the others' rows travel, and g is never gathered
    // into one tensor.
    std::unique_ptr<dist::StagedAllGather> gather =
        dist::record_all_gather_staged(group_of(tp, "sp_row_parallel_linear backward"), Tensor(), g_rows);
    const Tensor w = need_x ? sw.unpack("sp_row_parallel_linear") : Tensor();
    Tensor gx = need_x ? Tensor::empty({n, in_local}, g_rows.dtype(), g_rows.device()) : Tensor(), gw, gb;
    const Tensor lb = need_u ? slb.unpack("sp_row_parallel_linear") : Tensor();
    const Tensor lu = need_lb ? contiguous(su.unpack("sp_row_parallel_linear")) : Tensor();
    Tensor gu = need_u ? Tensor::empty({n, lb.size(1)}, g_rows.dtype(), g_rows.device()) : Tensor(), glb;
    for (int step = 0; step < tp.size; ++step) {
      const int q = (tp.rank + step) % tp.size;
      const Tensor g_q = step == 0 ? g_rows : gather->arrived(q);
      if (need_x) gemm_into(g_q, w, Tensor(), rows_of(gx, q, rows));
      if (need_u) gemm_into(g_q, lb, Tensor(), rows_of(gu, q, rows));  // du_q = g_q b
      if (need_lb) {  // db += g_qᵀ u_q
        const Tensor g_qt = transpose(g_q, 0, 1), u_q = rows_of(lu, q, rows);
        if (glb.defined()) {
          addmm_(glb, g_qt, u_q);
        } else {
          glb = matmul(g_qt, u_q);
        }
      }
      if (need_w) {  // gW += g_qᵀ x_q, summed inside the GEMM
        const Tensor g_qt = transpose(g_q, 0, 1), x_q = contiguous(sx[size_t(q)].unpack("sp_row_parallel_linear"));
        if (gw.defined()) {
          addmm_(gw, g_qt, x_q);
        } else {
          gw = matmul(g_qt, x_q);
        }
      }
    }
    gather->finish();  // frees the peers' rows after the GEMMs above; nothing here waits for it
    if (need_b) gb = sum(g_rows, {0});  // this rank's rows: partial over tp (sum_grads_over_tp)
    // Each input block's gradient: its rows of gx (views of one buffer, so a split of one input
    // into blocks finds them in place).
    TensorList grads;
    for (int q = 0; q < tp.size; ++q) grads.push_back(need_x ? rows_of(gx, q, rows) : Tensor());
    grads.insert(grads.end(), {gw, gb, need_r ? g_rows : Tensor(), gu, glb});  // the residual's: the output's own
    return grads;
  });
  return mine;
}

}  // namespace

Tensor sp_column_parallel_linear(const Tensor& x_rows, const Tensor& weight, const Tensor& bias, const TpGroup& tp) {
  return column_parallel(x_rows, weight, bias, tp);
}

Tensor sp_row_parallel_linear_start(const Tensor& x, const Tensor& weight, const Tensor& bias, const TpGroup& tp,
                                    dist::WorkPtr& work, const Tensor& residual, const LowRankTerm& low_rank) {
  TRIREME_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) && x.size(0) % tp.size == 0,
                "sp_row_parallel_linear: input ", x.sizes(), " and weight ", weight.sizes(),
                " do not match, or the rows are not divisible by tp = ", tp.size);
  group_of(tp, "sp_row_parallel_linear");
  const int64_t rows = x.size(0) / tp.size;
  // One node splits x into the blocks; the blocks' gradients come back as rows of one buffer,
  // which split's backward takes in place.
  const std::vector<Tensor> blocks = split(x, rows, 0);
  return row_parallel_start([&](int q) { return blocks[size_t(q)]; }, rows, weight, bias, tp, work, residual,
                            low_rank);
}

}  // namespace trireme::parallel
