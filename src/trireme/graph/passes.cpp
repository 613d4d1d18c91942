// Dead-code elimination, common-subexpression elimination and memory planning over a Graph.
#include "trireme/graph/passes.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/fused.h"
#include "trireme/kernels/nn.h"

namespace trireme::graph {
namespace {

bool outlives_step(BufferKind k) { return k != BufferKind::intermediate; }

int buffer_of(const Graph& g, int value) { return value < 0 ? -1 : g.values[size_t(value)].buffer; }

// Whether a value is its whole buffer, laid out contiguously from its start.
bool whole_buffer(const Graph& g, int value) {
  const Value& v = g.values[size_t(value)];
  return v.offset == 0 && v.strides == contiguous_strides(v.sizes) &&
         size_t(shape_numel(v.sizes)) * dtype_size(v.dtype) == g.buffers[size_t(v.buffer)].nbytes;
}

// Note [in-place reuse]
// An elementwise kernel (kernels/cpu/elementwise.cpp and its CUDA twin: unary, binary, where; and
// cross_entropy_backward, whose gradient element is a function of the logit at its position)
// reads element k of its inputs before it writes element k of its output, in every loop of both
// backends, so its output may take the bytes of an input whose last use it is: same shape and
// dtype, both whole contiguous buffers. Not copy: a contiguous copy is a memcpy, whose source
// and destination must not overlap. The eager engine cannot do this (it does
// not know the input's last use); the plan can, which is what puts its arena below the eager
// peak. Fused elementwise calls (graph/fusion.h) qualify too. Kernels are recognised by op name:
// signature types do not tell them apart (a matmul's
// signature is where's), and an op missing from the list is only never reused in place.
bool elementwise(const Node& n) {
  static const std::set<std::string> ops = {
      "neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "relu", "silu", "gelu_erf", "gelu_tanh",
      "pow_scalar", "rsub_scalar", "rdiv_scalar", "add_scalar", "mul_scalar", "add", "sub", "mul", "div", "pow",
      "maximum", "tanh_backward", "sigmoid_backward", "relu_backward", "silu_backward", "gelu_erf_backward",
      "gelu_tanh_backward", "where"};
  const bool signature = n.kernel_type == std::type_index(typeid(UnaryKernel)) ||
                         n.kernel_type == std::type_index(typeid(BinaryKernel)) ||
                         n.kernel_type == std::type_index(typeid(WhereKernel));
  // A fused kernel loads every input of an element (a CPU tile, a GPU thread's element) before
  // it stores that element's outputs.
  if (n.kernel_type == std::type_index(typeid(FusedElementwiseKernel))) return true;
  if (n.op == "cross_entropy_backward") return n.kernel_type == std::type_index(typeid(CrossEntropyBackwardKernel));
  return signature && ops.count(n.op) > 0;
}

bool written_by(const Graph& g, const Node& n, int buffer) {
  for (size_t a = 0; a < n.args.size(); ++a) {
    if (n.written[a] && buffer_of(g, n.args[a]) == buffer) return true;
  }
  return false;
}

}  // namespace

Graph eliminate_dead_code(const Graph& g) {
  std::vector<bool> needed(g.buffers.size(), false);
  for (int v : g.outputs) needed[size_t(buffer_of(g, v))] = true;
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool live = true;
    bool writes_any = false;
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (!n.written[a] || n.args[a] < 0) continue;
      writes_any = true;
      const int b = buffer_of(g, n.args[a]);
      if (outlives_step(g.buffers[size_t(b)].kind) || needed[size_t(b)]) {
        live = true;
        break;
      }
      live = false;
    }
    if (!writes_any) live = true;
    if (!live) continue;
    keep[i] = true;
    for (int v : n.args) {
      if (v >= 0) needed[size_t(buffer_of(g, v))] = true;
    }
  }
  Graph out = g;
  out.nodes.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) out.nodes.push_back(g.nodes[i]);
  }
  return out;
}

Graph eliminate_common_subexpressions(const Graph& g) {
  std::vector<int> writes(g.buffers.size(), 0);
  for (const Node& n : g.nodes) {
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.written[a] && n.args[a] >= 0) ++writes[size_t(buffer_of(g, n.args[a]))];
    }
  }
  auto pure = [&](const Node& n) {
    if (n.dynamic || !n.attrs_comparable) return false;
    bool any_output = false;
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (!n.written[a]) continue;
      if (n.args[a] < 0) return false;
      const int b = buffer_of(g, n.args[a]);
      if (g.buffers[size_t(b)].kind != BufferKind::intermediate || writes[size_t(b)] != 1 || !whole_buffer(g, n.args[a]))
        return false;
      for (size_t o = 0; o < n.args.size(); ++o) {  // an output that is also read is an update, not a result
        if (o != a && !n.written[o] && buffer_of(g, n.args[o]) == b) return false;
      }
      any_output = true;
    }
    return any_output;
  };
  // A merged call's output buffers are replaced by the kept call's: every view of them (not only
  // the written values: a later reshape or slice of the result too) moves to the same view of
  // the kept buffer.
  Graph out = g;
  out.nodes.clear();
  std::vector<int> buffer_remap(g.buffers.size(), -1);
  std::map<std::tuple<int, Shape, Shape, int64_t, DType>, int> value_ids;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    value_ids.emplace(std::make_tuple(val.buffer, val.sizes, val.strides, val.offset, val.dtype), int(v));
  }
  auto mapped = [&](int v) {
    if (v < 0) return v;
    const Value& val = out.values[size_t(v)];
    const int b = buffer_remap[size_t(val.buffer)];
    if (b < 0) return v;
    auto [it, fresh] = value_ids.emplace(std::make_tuple(b, val.sizes, val.strides, val.offset, val.dtype),
                                         int(out.values.size()));
    if (fresh) {
      Value moved = val;
      moved.buffer = b;
      out.values.push_back(std::move(moved));
    }
    return it->second;
  };
  std::map<std::string, size_t> seen;  // key -> index into out.nodes
  for (const Node& original : g.nodes) {
    Node n = original;
    for (int& v : n.args) v = mapped(v);
    if (!pure(original) || original.recomputed) {
      out.nodes.push_back(std::move(n));
      continue;
    }
    std::string key = n.op;
    key += '\0';
    key.append(reinterpret_cast<const char*>(&n.kernel), sizeof(n.kernel));
    key += n.attrs;
    for (size_t a = 0; a < n.args.size(); ++a) {
      key += n.written[a] ? 'w' : 'r';
      if (n.written[a]) {
        const Value& v = g.values[size_t(n.args[a])];
        for (int64_t s : v.sizes) key += std::to_string(s) + ",";
        key += dtype_name(v.dtype);
      } else {
        key += std::to_string(n.args[a]) + "@" + std::to_string(n.read_versions[a]);
      }
      key += ';';
    }
    auto [it, fresh] = seen.emplace(key, out.nodes.size());
    if (fresh) {
      out.nodes.push_back(std::move(n));
      continue;
    }
    const Node& kept = out.nodes[it->second];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.written[a]) buffer_remap[size_t(buffer_of(g, original.args[a]))] = buffer_of(g, kept.args[a]);
    }
  }
  for (int& v : out.outputs) v = mapped(v);
  return out;
}

BufferSpans buffer_spans(const Graph& g) {
  BufferSpans s{std::vector<int>(g.buffers.size(), -1), std::vector<int>(g.buffers.size(), -1)};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int v : g.nodes[i].args) {
      if (v < 0) continue;
      const size_t b = size_t(buffer_of(g, v));
      if (s.first[b] < 0) s.first[b] = int(i);
      s.last[b] = int(i);
    }
  }
  return s;
}

Graph schedule_for_memory(const Graph& g) {
  const BufferSpans spans = buffer_spans(g);
  const std::vector<int>& first = spans.first;
  const std::vector<int>& last = spans.last;
  // Per node: the buffers it touches, and whether it writes each.
  auto touches = [&](const Node& n) {
    std::map<int, bool> out;
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0) continue;
      bool& w = out[buffer_of(g, n.args[a])];
      w = w || n.written[a];
    }
    return out;
  };
  std::vector<Node> order;
  std::vector<std::map<int, bool>> touched;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::map<int, bool> mine = touches(n);
    bool frees = false, takes = false;
    for (const auto& [b, w] : mine) {
      if (g.buffers[size_t(b)].kind != BufferKind::intermediate) continue;
      frees = frees || last[size_t(b)] == int(i);
      takes = takes || first[size_t(b)] == int(i);
    }
    size_t at = order.size();
    if (frees && !takes && !n.pinned) {
      while (at > 0) {
        if (order[at - 1].pinned) break;  // no call moves across a transfer's post or wait
        bool depends = false;
        for (const auto& [b, w] : touched[at - 1]) {
          auto it = mine.find(b);
          if (it != mine.end() && (w || it->second)) {
            depends = true;
            break;
          }
        }
        if (depends) break;
        --at;
      }
    }
    order.insert(order.begin() + std::ptrdiff_t(at), n);
    touched.insert(touched.begin() + std::ptrdiff_t(at), std::move(mine));
  }
  Graph out = g;
  out.nodes = std::move(order);
  return out;
}

MemoryPlan plan_memory(const Graph& g, size_t alignment) {
  MemoryPlan p;
  const size_t nb = g.buffers.size();
  p.offset.assign(nb, -1);
  BufferSpans spans = buffer_spans(g);
  p.first = std::move(spans.first);
  p.last = std::move(spans.last);
  // See Note [in-place reuse]: which buffers take over an input's bytes, and the chains they form.
  p.reuses.assign(nb, -1);
  std::vector<bool> reused(nb, false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!elementwise(n)) continue;
    for (size_t w = 0; w < n.args.size(); ++w) {
      if (!n.written[w] || n.args[w] < 0) continue;
      const int out = buffer_of(g, n.args[w]);
      if (g.buffers[size_t(out)].kind != BufferKind::intermediate || p.first[size_t(out)] != int(i) ||
          !whole_buffer(g, n.args[w]) || p.reuses[size_t(out)] >= 0)
        continue;
      for (size_t r = 0; r < n.args.size(); ++r) {
        if (n.written[r] || n.args[r] < 0) continue;
        const int in = buffer_of(g, n.args[r]);
        const Value &vi = g.values[size_t(n.args[r])], &vo = g.values[size_t(n.args[w])];
        if (in == out || g.buffers[size_t(in)].kind != BufferKind::intermediate || p.last[size_t(in)] != int(i) ||
            reused[size_t(in)] || !whole_buffer(g, n.args[r]) || vi.sizes != vo.sizes || vi.dtype != vo.dtype ||
            written_by(g, n, in))
          continue;
        p.reuses[size_t(out)] = in;
        reused[size_t(in)] = true;
        break;
      }
    }
  }
  std::vector<int> root(nb);
  for (size_t b = 0; b < nb; ++b) {
    int r = int(b);
    while (p.reuses[size_t(r)] >= 0) r = p.reuses[size_t(r)];
    root[b] = r;
  }
  // A chain is placed as one slot, live from its first buffer's first use to its last one's last.
  std::vector<int> sfirst(nb, -1), slast(nb, -1);
  std::vector<int> planned;
  for (size_t b = 0; b < nb; ++b) {
    if (g.buffers[b].kind != BufferKind::intermediate || p.first[b] < 0) continue;
    const size_t r = size_t(root[b]);
    if (sfirst[r] < 0) planned.push_back(int(r));
    sfirst[r] = sfirst[r] < 0 ? p.first[b] : std::min(sfirst[r], p.first[b]);
    slast[r] = std::max(slast[r], p.last[b]);
  }
  auto rounded = [&](size_t n) { return (n + alignment - 1) / alignment * alignment; };
  auto size_of = [&](int b) { return rounded(std::max<size_t>(g.buffers[size_t(b)].nbytes, 1)); };
  // Places the buffers in `order`, each at the lowest offset (first fit) or in the smallest gap
  // (best fit) where it overlaps no placed buffer live at the same time.
  auto place = [&](const std::vector<int>& order, bool best_fit, std::vector<int64_t>& offset) {
    size_t arena = 0;
    std::vector<int> placed;
    for (int b : order) {
      const size_t size = size_of(b);
      std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of placed buffers live at the same time
      for (int o : placed) {
        if (slast[size_t(o)] < sfirst[size_t(b)] || slast[size_t(b)] < sfirst[size_t(o)]) continue;
        busy.emplace_back(size_t(offset[size_t(o)]), size_t(offset[size_t(o)]) + size_of(o));
      }
      std::sort(busy.begin(), busy.end());
      size_t at = 0, chosen = SIZE_MAX, chosen_gap = SIZE_MAX;
      for (const auto& [begin, end] : busy) {
        if (at + size <= begin) {
          if (!best_fit) {
            chosen = at;
            break;
          }
          if (begin - at < chosen_gap) chosen = at, chosen_gap = begin - at;
        }
        at = std::max(at, end);
      }
      if (chosen == SIZE_MAX) chosen = at;  // above everything live
      offset[size_t(b)] = int64_t(chosen);
      arena = std::max(arena, chosen + size);
      placed.push_back(b);
    }
    return arena;
  };
  // A few orders, the smallest arena wins: by size (largest first), by size then lifetime, and
  // by first use (as an allocator would meet them).
  std::vector<std::vector<int>> orders(3, planned);
  auto bytes = [&](int b) { return g.buffers[size_t(b)].nbytes; };
  std::stable_sort(orders[0].begin(), orders[0].end(), [&](int a, int b) { return bytes(a) > bytes(b); });
  std::stable_sort(orders[1].begin(), orders[1].end(), [&](int a, int b) {
    return bytes(a) * size_t(slast[size_t(a)] - sfirst[size_t(a)] + 1) >
           bytes(b) * size_t(slast[size_t(b)] - sfirst[size_t(b)] + 1);
  });
  std::stable_sort(orders[2].begin(), orders[2].end(),
                   [&](int a, int b) { return sfirst[size_t(a)] < sfirst[size_t(b)]; });
  p.arena_bytes = SIZE_MAX;
  for (const auto& order : orders) {
    for (bool best_fit : {false, true}) {
      std::vector<int64_t> offset(nb, -1);
      const size_t arena = place(order, best_fit, offset);
      if (arena < p.arena_bytes) p.arena_bytes = arena, p.offset = std::move(offset);
    }
  }
  if (planned.empty()) p.arena_bytes = 0;
  for (size_t b = 0; b < nb; ++b) {
    if (g.buffers[b].kind != BufferKind::intermediate || p.first[b] < 0) continue;
    p.offset[b] = p.offset[size_t(root[b])];
    p.intermediate_bytes += g.buffers[b].nbytes;
    ++p.planned_buffers;
  }
  return p;
}

std::vector<std::pair<int, int>> plan_conflicts(const Graph& g, const MemoryPlan& plan) {
  std::vector<std::pair<int, int>> out;
  for (size_t a = 0; a < g.buffers.size(); ++a) {
    if (plan.offset[a] < 0) continue;
    for (size_t b = a + 1; b < g.buffers.size(); ++b) {
      if (plan.offset[b] < 0) continue;
      const bool live_together = !(plan.last[a] < plan.first[b] || plan.last[b] < plan.first[a]);
      const size_t a0 = size_t(plan.offset[a]), a1 = a0 + g.buffers[a].nbytes;
      const size_t b0 = size_t(plan.offset[b]), b1 = b0 + g.buffers[b].nbytes;
      const bool in_place = (plan.reuses[b] == int(a) && plan.last[a] == plan.first[b]) ||
                            (plan.reuses[a] == int(b) && plan.last[b] == plan.first[a]);
      if (live_together && a0 < b1 && b0 < a1 && !in_place) out.emplace_back(int(a), int(b));
    }
  }
  return out;
}

}  // namespace trireme::graph
