// Tensor-parallel region mappings: the collectives with their conjugate backwards.
#include "trireme/parallel/tp_mappings.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/context.h"

namespace trireme::parallel {

using autograd::any_requires_grad;
using autograd::record;
using autograd::TensorList;

TpGroup TpGroup::of(const ParallelContext& ctx) {
  const ParallelLayout& L = ctx.layout();
  return {ctx.tp_group(), L.tp, ctx.tp_rank()};
}

namespace {

bool active(const TpGroup& tp) { return tp.size > 1; }

dist::ProcessGroup& group_of(const TpGroup& tp, const char* op) {
  TRIREME_CHECK(tp.group != nullptr && tp.group->size() == tp.size, op, ": tensor-parallel size ", tp.size,
                " needs its process group");
  return *tp.group;
}

// The group's collectives, each one node of a traced step (dist/recorded_collective.h).
dist::WorkPtr all_reduce_of(const TpGroup& tp, const char* op, const Tensor& t,
                            dist::ReduceOp reduce = dist::ReduceOp::sum) {
  return dist::record_collective("all_reduce", {t}, [g = &group_of(tp, op), reduce](Tensor* const* x) {
    return g->all_reduce(*x[0], {.op = reduce});
  });
}
dist::WorkPtr all_gather_of(const TpGroup& tp, const char* op, const Tensor& out, const Tensor& in) {
  return dist::record_collective("all_gather", {out, in},
                                 [g = &group_of(tp, op)](Tensor* const* x) { return g->all_gather(*x[0], *x[1]); });
}
dist::WorkPtr reduce_scatter_of(const TpGroup& tp, const char* op, const Tensor& out, const Tensor& in) {
  return dist::record_collective("reduce_scatter", {out, in},
                                 [g = &group_of(tp, op)](Tensor* const* x) { return g->reduce_scatter(*x[0], *x[1]); });
}

// A fresh contiguous copy reduced over the group (the input may be a view or shared by autograd).
Tensor all_reduced(const Tensor& x, const TpGroup& tp, const char* op) {
  NoGradGuard no_grad;
  Tensor y = clone(x.detach());
  all_reduce_of(tp, op, y)->wait();
  return y;
}

// x (..., m) -> (..., m * size), rank r's chunk at columns [r m, (r+1) m).
Tensor all_gathered_last_dim(const Tensor& x, const TpGroup& tp, const char* op) {
  NoGradGuard no_grad;
  Tensor in = contiguous(x.detach());
  const int64_t m = in.dim() ? in.size(-1) : 1;
  Tensor all = Tensor::empty({int64_t(tp.size) * in.numel()}, in.dtype(), in.device());
  all_gather_of(tp, op, all, in)->wait();
  // all holds the ranks' chunks one after another; rank k's goes to columns [k m, (k+1) m).
  Shape out_shape = in.sizes();
  out_shape.back() = m * tp.size;
  Tensor out = Tensor::empty(out_shape, in.dtype(), in.device());
  for (int k = 0; k < tp.size; ++k) {
    Tensor dst = narrow(out, -1, k * m, m);
    copy_(dst, view(narrow(all, 0, k * in.numel(), in.numel()), in.sizes()));
  }
  return out;
}

}  // namespace

void tp_all_reduce_(const Tensor& t, const TpGroup& tp, dist::ReduceOp op) {
  if (!active(tp)) return;
  TRIREME_CHECK(t.is_contiguous(), "tp_all_reduce_: the tensor ", t.sizes(), " must be contiguous");
  all_reduce_of(tp, "tp_all_reduce_", t, op)->wait();
}

Tensor copy_to_tp_region(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  Tensor y = x.detach();  // identity: an alias with its own autograd record
  if (any_requires_grad({&x})) {
    record("copy_to_tp_region", {&x}, {&y}, [tp](const TensorList& g) -> TensorList {
      return {all_reduced(g[0], tp, "copy_to_tp_region backward")};
    });
  }
  return y;
}

Tensor reduce_from_tp_region(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  Tensor y = all_reduced(x, tp, "reduce_from_tp_region");
  if (any_requires_grad({&x})) {
    record("reduce_from_tp_region", {&x}, {&y}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  }
  return y;
}

Tensor start_reduce_from_tp_region_owned(const Tensor& x, const TpGroup& tp, dist::WorkPtr& work) {
  work = nullptr;
  if (!active(tp)) return x;
  TRIREME_CHECK(x.is_contiguous(), "reduce_from_tp_region_owned: needs a contiguous fresh tensor, got ", x.str());
  Tensor y = x.detach();  // shares x's storage: the all-reduce below is x's last use
  {
    NoGradGuard no_grad;
    work = all_reduce_of(tp, "reduce_from_tp_region", y);
  }
  if (any_requires_grad({&x})) {
    record("reduce_from_tp_region", {&x}, {&y}, [](const TensorList& g) -> TensorList { return {g[0]}; });
  }
  return y;
}

Tensor reduce_from_tp_region_owned(const Tensor& x, const TpGroup& tp) {
  dist::WorkPtr work;
  Tensor y = start_reduce_from_tp_region_owned(x, tp, work);
  if (work) work->wait();
  return y;
}

namespace {
Tensor my_chunk(const Tensor& x, const TpGroup& tp, const char* op) {
  const int64_t n = x.size(-1);
  TRIREME_CHECK(n % tp.size == 0, op, ": the last dim of ", x.sizes(), " is not divisible by tp size ", tp.size);
  const int64_t m = n / tp.size;
  NoGradGuard no_grad;
  return contiguous(narrow(x.detach(), -1, tp.rank * m, m));
}
}  // namespace

Tensor scatter_to_tp_region(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  Tensor y = my_chunk(x, tp, "scatter_to_tp_region");
  if (any_requires_grad({&x})) {
    record("scatter_to_tp_region", {&x}, {&y}, [tp](const TensorList& g) -> TensorList {
      return {all_gathered_last_dim(g[0], tp, "scatter_to_tp_region backward")};
    });
  }
  return y;
}

Tensor gather_from_tp_region(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  Tensor y = all_gathered_last_dim(x, tp, "gather_from_tp_region");
  if (any_requires_grad({&x})) {
    record("gather_from_tp_region", {&x}, {&y}, [tp](const TensorList& g) -> TensorList {
      return {my_chunk(g[0], tp, "gather_from_tp_region backward")};
    });
  }
  return y;
}

// ---- sequence parallelism ----

namespace {

Shape with_rows(Shape s, int64_t rows) {
  s[0] = rows;
  return s;
}

// x (n/size, ...) -> (n, ...), every rank's rows in rank order (no autograd).
Tensor gathered_rows(const Tensor& x, const TpGroup& tp, const char* op) {
  NoGradGuard no_grad;
  Tensor in = contiguous(x.detach());
  Tensor out = Tensor::empty(with_rows(in.sizes(), in.size(0) * tp.size), in.dtype(), in.device());
  all_gather_of(tp, op, out, in)->wait();
  return out;
}

// x (n, ...) -> this rank's rows of the sum over the group (no autograd); the sum is started,
// `work` says when it is done.
Tensor scattered_rows(const Tensor& x, const TpGroup& tp, const char* op, dist::WorkPtr& work) {
  NoGradGuard no_grad;
  TRIREME_CHECK(x.dim() >= 1 && x.size(0) % tp.size == 0, op, ": ", x.size(0),
                " rows are not divisible by the tensor-parallel size ", tp.size);
  Tensor in = contiguous(x.detach());
  Tensor out = Tensor::empty(with_rows(in.sizes(), in.size(0) / tp.size), in.dtype(), in.device());
  work = reduce_scatter_of(tp, op, out, in);
  return out;
}

}  // namespace

Tensor gather_rows_from_sp(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  TRIREME_CHECK(x.dim() >= 1, "gather_rows_from_sp: needs a tensor with rows, got ", x.str());
  Tensor y = gathered_rows(x, tp, "gather_rows_from_sp");
  if (any_requires_grad({&x})) {
    record("gather_rows_from_sp", {&x}, {&y}, [tp](const TensorList& g) -> TensorList {
      dist::WorkPtr work;
      Tensor mine = scattered_rows(g[0], tp, "gather_rows_from_sp backward", work);
      work->wait();
      return {mine};
    });
  }
  return y;
}

Tensor reduce_scatter_rows_to_sp(const Tensor& x, const TpGroup& tp) {
  if (!active(tp)) return x;
  dist::WorkPtr work;
  Tensor y = scattered_rows(x, tp, "reduce_scatter_rows_to_sp", work);
  work->wait();
  if (any_requires_grad({&x})) {
    record("reduce_scatter_rows_to_sp", {&x}, {&y}, [tp](const TensorList& g) -> TensorList {
      return {gathered_rows(g[0], tp, "reduce_scatter_rows_to_sp backward")};
    });
  }
  return y;
}

namespace {
// Tensors of these shapes (undefined ones count as zeros) summed over tp in one all-reduce:
// packed, summed, unpacked. Every rank packs the same shapes in the same order.
std::vector<Tensor> summed_over_tp(const std::vector<Tensor>& g, const std::vector<Shape>& shapes, const TpGroup& tp,
                                   const char* op) {
  NoGradGuard no_grad;
  const Tensor* any = nullptr;
  for (const Tensor& t : g)
    if (t.defined()) any = &t;
  TRIREME_CHECK(any != nullptr, op, ": no gradient arrived");
  std::vector<Tensor> flat;
  for (size_t k = 0; k < g.size(); ++k)
    flat.push_back(reshape(g[k].defined() ? contiguous(g[k]) : zeros(shapes[k], any->dtype(), any->device()), {-1}));
  Tensor packed = cat(flat, 0);
  all_reduce_of(tp, op, packed)->wait();
  std::vector<Tensor> result;
  int64_t at = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    result.push_back(reshape(narrow(packed, 0, at, flat[k].numel()), shapes[k]));
    at += flat[k].numel();
  }
  return result;
}
}  // namespace

void sum_partial_grads_over_tp(const std::vector<Tensor>& params, const TpGroup& tp) {
  if (!active(tp)) return;
  std::vector<Tensor> grads, used;
  std::vector<Shape> shapes;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.requires_grad()) continue;
    used.push_back(p);
    grads.push_back(p.grad());
    shapes.push_back(p.sizes());
  }
  if (used.empty()) return;
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return;  // no backward ran: nothing to sum (every rank alike)
  std::vector<Tensor> sums = summed_over_tp(grads, shapes, tp, "sum_partial_grads_over_tp");
  NoGradGuard no_grad;
  for (size_t k = 0; k < used.size(); ++k) {
    if (grads[k].defined()) {
      Tensor g = grads[k];
      copy_(g, sums[k]);
    } else {
      used[k].set_grad(clone(sums[k]));
    }
  }
}

std::vector<Tensor> sum_grads_over_tp(const std::vector<Tensor>& params, const TpGroup& tp) {
  if (!active(tp)) return params;
  std::vector<Tensor> out(params.size()), ins;
  std::vector<Tensor*> outs;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) continue;
    out[i] = params[i].detach();  // an alias with its own autograd record
    ins.push_back(params[i]);
    outs.push_back(&out[i]);
    shapes.push_back(params[i].sizes());
  }
  if (ins.empty() || !any_requires_grad(ins)) return out;
  record("sum_grads_over_tp", ins, outs, [tp, shapes](const TensorList& g) -> TensorList {
    // One all-reduce for all of them. A gradient that did not flow is zero here, as it is on a
    // rank where it did flow.
    return summed_over_tp(g, shapes, tp, "sum_grads_over_tp");
  });
  return out;
}

std::function<std::function<void()>(Tensor&)> tp_grad_input_all_reduce(const TpGroup& tp) {
  return [tp](Tensor& grad_input) -> std::function<void()> {
    if (!active(tp)) return nullptr;
    // grad_input is the linear backward's own fresh result: reducing it in place is safe.
    dist::WorkPtr work = all_reduce_of(tp, "column-parallel linear backward", grad_input);
    return [work] { work->wait(); };
  };
}

}  // namespace trireme::parallel
