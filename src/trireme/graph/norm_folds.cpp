// The passes that fold neighbouring calls into norms (norm_folds.h).
#include "trireme/graph/norm_folds.h"

#include <typeindex>

#include "trireme/graph/call_touches.h"
#include "trireme/kernels/nn.h"

namespace trireme::graph {
namespace {

bool sixteen_bit(DType t) { return t == DType::bf16 || t == DType::f16; }

// The index among a norm call's tensor arguments of its output, in the order of the kernel
// signatures (kernels/nn.h); -1 for any other call.
int norm_output_arg(const Node& n) {
  if (is_kernel(n, typeid(LayerNormKernel))) return 4;  // x, residual, weight, bias, y, sum, mean, rstd
  if (is_kernel(n, typeid(RmsNormKernel))) return 3;    // x, residual, weight, y, sum, rstd
  return -1;
}
constexpr size_t kNormResidualArg = 1;  // a forward's residual; its sum follows y
// For a norm backward, the index of its addend (grad_x follows it); -1 for any other call.
int norm_backward_addend_arg(const Node& n) {
  if (is_kernel(n, typeid(LayerNormBackwardKernel))) return 5;  // grad, x, weight, mean, rstd, addend, grad_x, grad_x_edge, ...
  if (is_kernel(n, typeid(RmsNormBackwardKernel))) return 4;    // grad, x, weight, rstd, addend, grad_x, grad_x_edge, ...
  return -1;
}
bool is_add(const Node& n) { return is_binary(n, "add"); }

}  // namespace

Graph fold_norm_casts(const Graph& g) {
  const CallTouches touches(g);
  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  for (int i = 0; i < int(nodes.size()); ++i) {
    Node& n = nodes[size_t(i)];
    if (n.dtype != DType::f32) continue;
    if (const int iy = norm_output_arg(n); iy >= 0 && n.args[size_t(iy)] >= 0) {
      // Forward: norm -> y (f32) -> cast -> out (16-bit).
      const Value& y = touches.value(n.args[size_t(iy)]);
      const int c = touches.only_other_toucher(n.args[size_t(iy)], i);
      if (c < 0 || y.dtype != DType::f32 || !is_cast(g.nodes[size_t(c)])) continue;
      const Node& cast = g.nodes[size_t(c)];
      const Value& out = touches.value(cast.args[1]);
      if (!same_view(touches.value(cast.args[0]), y) || !sixteen_bit(out.dtype) || out.sizes != y.sizes ||
          !is_contiguous(out) || touches.touched_between(cast.args[1], i, c, false))
        continue;
      n.args[size_t(iy)] = cast.args[1];
      n.read_versions[size_t(iy)] = cast.read_versions[1];
      dropped[size_t(c)] = true;
    } else if (norm_backward_addend_arg(n) >= 0 && n.args[0] >= 0) {
      // Backward: in (16-bit) -> cast -> grad (f32) -> norm backward.
      const Value& grad = touches.value(n.args[0]);
      const int c = touches.only_writer_before(n.args[0], i);
      if (c < 0 || grad.dtype != DType::f32 || !is_cast(g.nodes[size_t(c)])) continue;
      const Node& cast = g.nodes[size_t(c)];
      const Value& in = touches.value(cast.args[0]);
      if (!same_view(touches.value(cast.args[1]), grad) || !sixteen_bit(in.dtype) || in.sizes != grad.sizes ||
          !is_contiguous(in) || touches.touched_between(cast.args[0], c, i, true))
        continue;
      n.args[0] = cast.args[0];
      n.read_versions[0] = cast.read_versions[0];
      dropped[size_t(c)] = true;
    }
  }
  return without_dropped(g, std::move(nodes), dropped);
}

Graph fold_norm_residual_adds(const Graph& g) {
  const CallTouches touches(g);
  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  for (int i = 0; i < int(nodes.size()); ++i) {
    Node& n = nodes[size_t(i)];
    const int iy = norm_output_arg(n);
    if (iy < 0 || n.args[0] < 0 || n.args[kNormResidualArg] >= 0 || n.args[size_t(iy) + 1] >= 0) continue;
    // add(a, b) -> x -> norm, and perhaps cast(16-bit) -> a or b
    const int a = touches.first_writer(n.args[0]);
    if (a < 0 || a >= i || !is_add(g.nodes[size_t(a)]) || touches.next_reader_of_own_write(n.args[0], a) != i) continue;
    const Node& add = g.nodes[size_t(a)];
    const Value &x = touches.value(n.args[0]), &out = touches.value(add.args[2]);
    if (!same_view(out, x) || !is_contiguous(out)) continue;
    auto plain_operand = [&](int k) {
      const Value& o = touches.value(add.args[size_t(k)]);
      return o.dtype == out.dtype && o.sizes == out.sizes && is_contiguous(o) && o.buffer != out.buffer &&
             !touches.touched_between(add.args[size_t(k)], a, i, true);
    };
    // The cast that wrote operand k from a value of y's 16-bit dtype for this add alone; else -1.
    const DType y_dtype = touches.value(n.args[size_t(iy)]).dtype;
    auto widening_cast = [&](int k) {
      const int c = touches.only_writer_before(add.args[size_t(k)], a);
      if (c < 0 || !sixteen_bit(y_dtype) || !is_cast(g.nodes[size_t(c)])) return -1;
      const Node& cast = g.nodes[size_t(c)];
      const Value& in = touches.value(cast.args[0]);
      const bool ok = same_view(touches.value(cast.args[1]), touches.value(add.args[size_t(k)])) && in.dtype == y_dtype &&
                      in.sizes == out.sizes && is_contiguous(in) && !touches.touched_between(cast.args[0], c, i, true);
      return ok ? c : -1;
    };
    int kr = 1, cast = widening_cast(1);
    if (cast < 0 && (cast = widening_cast(0)) >= 0) kr = 0;
    const int kx = 1 - kr;
    if (!plain_operand(kx) || (cast < 0 && !plain_operand(kr))) continue;
    if (touches.value(add.args[size_t(kx)]).buffer == touches.value(add.args[size_t(kr)]).buffer) continue;
    n.args[0] = add.args[size_t(kx)];
    n.read_versions[0] = add.read_versions[size_t(kx)];
    if (cast >= 0) {
      n.args[kNormResidualArg] = g.nodes[size_t(cast)].args[0];
      n.read_versions[kNormResidualArg] = g.nodes[size_t(cast)].read_versions[0];
      dropped[size_t(cast)] = true;
    } else {
      n.args[kNormResidualArg] = add.args[size_t(kr)];
      n.read_versions[kNormResidualArg] = add.read_versions[size_t(kr)];
    }
    n.args[size_t(iy) + 1] = add.args[2];
    n.read_versions[size_t(iy) + 1] = add.read_versions[2];
    dropped[size_t(a)] = true;
  }
  return without_dropped(g, std::move(nodes), dropped);
}

Graph fold_norm_gradient_adds(const Graph& g) {
  const CallTouches touches(g);
  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  for (int i = 0; i < int(nodes.size()); ++i) {
    Node& n = nodes[size_t(i)];
    const int ia = norm_backward_addend_arg(n), ix = ia + 1;
    if (ia < 0 || n.args[size_t(ia)] >= 0 || n.args[size_t(ix)] < 0) continue;
    // norm backward -> grad_x -> add(grad_x, other) -> out
    const Value& gx = touches.value(n.args[size_t(ix)]);
    const int a = touches.only_other_toucher(n.args[size_t(ix)], i);
    if (a < 0 || !is_add(g.nodes[size_t(a)])) continue;
    const Node& add = g.nodes[size_t(a)];
    const bool first = same_view(touches.value(add.args[0]), gx);
    if (!first && !same_view(touches.value(add.args[1]), gx)) continue;
    const int other = add.args[first ? 1 : 0];
    const Value &o = touches.value(other), &out = touches.value(add.args[2]);
    if (o.buffer == gx.buffer || o.dtype != gx.dtype || o.sizes != gx.sizes || !is_contiguous(o) ||
        out.dtype != gx.dtype || out.sizes != gx.sizes || !is_contiguous(out) || out.buffer == o.buffer ||
        touches.touched_between(other, i, a, true) || touches.touched_between(add.args[2], i, a, false))
      continue;
    n.args[size_t(ia)] = other;
    n.read_versions[size_t(ia)] = add.read_versions[first ? 1 : 0];
    n.args[size_t(ix)] = add.args[2];
    n.read_versions[size_t(ix)] = add.read_versions[2];
    dropped[size_t(a)] = true;
  }
  return without_dropped(g, std::move(nodes), dropped);
}

Graph fold_norm_gradient_casts(const Graph& g) {
  const CallTouches touches(g);
  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  for (int i = 0; i < int(nodes.size()); ++i) {
    Node& n = nodes[size_t(i)];
    const int ix = norm_backward_addend_arg(n) + 1, ie = ix + 1;
    if (ix < 1 || n.dtype != DType::f32 || n.args[0] < 0 || n.args[size_t(ix)] < 0 || n.args[size_t(ie)] >= 0) continue;
    // norm backward -> grad_x (f32) -> cast -> out (grad's 16-bit dtype)
    const Value &grad = touches.value(n.args[0]), &gx = touches.value(n.args[size_t(ix)]);
    const int c = touches.next_reader_of_own_write(n.args[size_t(ix)], i);
    if (c < 0 || !sixteen_bit(grad.dtype) || !is_cast(g.nodes[size_t(c)])) continue;
    const Node& cast = g.nodes[size_t(c)];
    const Value& out = touches.value(cast.args[1]);
    if (!same_view(touches.value(cast.args[0]), gx) || out.dtype != grad.dtype || out.sizes != gx.sizes ||
        !is_contiguous(out) || touches.touched_between(cast.args[1], i, c, false))
      continue;
    n.args[size_t(ie)] = cast.args[1];
    n.read_versions[size_t(ie)] = cast.read_versions[1];
    dropped[size_t(c)] = true;
  }
  return without_dropped(g, std::move(nodes), dropped);
}

}  // namespace trireme::graph
