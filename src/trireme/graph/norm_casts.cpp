// The pass that folds casts into norms (norm_casts.h).
#include "trireme/graph/norm_casts.h"

#include <typeindex>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/nn.h"

namespace trireme::graph {
namespace {

bool sixteen_bit(DType t) { return t == DType::bf16 || t == DType::f16; }

bool plain(const Node& n) { return !n.pinned && !n.dynamic && n.refresh.empty() && n.u64_bindings.empty(); }

bool is_kernel(const Node& n, std::type_index kernel) { return n.kernel_type == kernel && plain(n); }

// The index among a norm call's tensor arguments of its output (forward) or gradient (backward),
// in the order of the kernel signatures (kernels/nn.h); -1 for any other call.
int norm_output_arg(const Node& n) {
  if (is_kernel(n, typeid(LayerNormKernel))) return 3;  // x, weight, bias, y, mean, rstd
  if (is_kernel(n, typeid(RmsNormKernel))) return 2;    // x, weight, y, rstd
  return -1;
}
bool is_norm_backward(const Node& n) {
  return is_kernel(n, typeid(LayerNormBackwardKernel)) || is_kernel(n, typeid(RmsNormBackwardKernel));
}
bool is_cast(const Node& n) { return is_kernel(n, typeid(CopyKernel)) && n.args.size() == 2 && n.args[0] >= 0 && n.args[1] >= 0; }

bool contiguous_view(const Value& v) { return v.strides == contiguous_strides(v.sizes); }

bool same_view(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset && a.dtype == b.dtype;
}

}  // namespace

Graph fold_norm_casts(const Graph& g) {
  const int nn = int(g.nodes.size());
  // Per buffer: the calls that touch it, in order, and whether each writes it.
  std::vector<std::vector<std::pair<int, bool>>> touching(g.buffers.size());
  for (int i = 0; i < nn; ++i) {
    const Node& n = g.nodes[size_t(i)];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0) continue;
      auto& t = touching[size_t(g.values[size_t(n.args[a])].buffer)];
      if (!t.empty() && t.back().first == i) {
        t.back().second = t.back().second || n.written[a];
      } else {
        t.emplace_back(i, n.written[a]);
      }
    }
  }
  auto value = [&](int v) -> const Value& { return g.values[size_t(v)]; };
  // An intermediate buffer touched by exactly the calls `first` and `second`, in that order.
  auto only_between = [&](int buffer, int first, int second) {
    const auto& t = touching[size_t(buffer)];
    return g.buffers[size_t(buffer)].kind == BufferKind::intermediate && t.size() == 2 && t[0].first == first &&
           t[1].first == second;
  };
  // Whether a call strictly between `from` and `to` touches `buffer` (writes it, when writes_only).
  auto touched_between = [&](int buffer, int from, int to, bool writes_only) {
    for (const auto& [i, writes] : touching[size_t(buffer)]) {
      if (i > from && i < to && (writes || !writes_only)) return true;
    }
    return false;
  };

  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(size_t(nn), false);
  for (int i = 0; i < nn; ++i) {
    Node& n = nodes[size_t(i)];
    if (n.dtype != DType::f32) continue;
    if (const int iy = norm_output_arg(n); iy >= 0 && n.args[size_t(iy)] >= 0) {
      // Forward: norm -> y (f32) -> cast -> out (16-bit).
      const Value& y = value(n.args[size_t(iy)]);
      const auto& t = touching[size_t(y.buffer)];
      if (y.dtype != DType::f32 || t.size() != 2) continue;
      const int c = t[1].first;
      const Node& cast = g.nodes[size_t(c)];
      if (!is_cast(cast) || !only_between(y.buffer, i, c) || !same_view(value(cast.args[0]), y)) continue;
      const Value& out = value(cast.args[1]);
      if (!sixteen_bit(out.dtype) || out.sizes != y.sizes || !contiguous_view(out) || out.buffer == y.buffer ||
          touched_between(out.buffer, i, c, false))
        continue;
      n.args[size_t(iy)] = cast.args[1];
      n.read_versions[size_t(iy)] = cast.read_versions[1];
      dropped[size_t(c)] = true;
    } else if (is_norm_backward(n) && !n.args.empty() && n.args[0] >= 0) {
      // Backward: in (16-bit) -> cast -> grad (f32) -> norm backward.
      const Value& grad = value(n.args[0]);
      const auto& t = touching[size_t(grad.buffer)];
      if (grad.dtype != DType::f32 || t.size() != 2 || !t[0].second) continue;
      const int c = t[0].first;
      const Node& cast = g.nodes[size_t(c)];
      if (!is_cast(cast) || !only_between(grad.buffer, c, i) || !same_view(value(cast.args[1]), grad)) continue;
      const Value& in = value(cast.args[0]);
      if (!sixteen_bit(in.dtype) || in.sizes != grad.sizes || !contiguous_view(in) || in.buffer == grad.buffer ||
          touched_between(in.buffer, c, i, true))
        continue;
      n.args[0] = cast.args[0];
      n.read_versions[0] = cast.read_versions[0];
      dropped[size_t(c)] = true;
    }
  }
  Graph out = g;
  out.nodes.clear();
  for (int i = 0; i < nn; ++i) {
    if (!dropped[size_t(i)]) out.nodes.push_back(std::move(nodes[size_t(i)]));
  }
  return out;
}

}  // namespace trireme::graph
