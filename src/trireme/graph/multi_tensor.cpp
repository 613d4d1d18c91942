// The multi-tensor passes (multi_tensor.h).
#include "trireme/graph/multi_tensor.h"

#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>

#include "trireme/graph/call_touches.h"
#include "trireme/graph/passes.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"

namespace trireme::graph {
namespace {

// The graph with the calls left in `placed`, in order.
Graph with_calls(const Graph& g, std::vector<std::optional<Node>> placed) {
  Graph out = g;
  out.nodes.clear();
  for (auto& n : placed) {
    if (n) out.nodes.push_back(std::move(*n));
  }
  return out;
}

int buffer_of(const Graph& g, int value) { return g.values[size_t(value)].buffer; }

// The bytes of its buffer a value spans: [begin, end).
std::pair<size_t, size_t> byte_range(const Value& v) {
  return {size_t(v.offset) * dtype_size(v.dtype), value_extent_bytes(v)};
}

bool mergeable(const Node& n) {
  if (n.op != "adamw" || n.kernel_type != std::type_index(typeid(AdamWKernel)) || n.pinned || !n.host_args ||
      !n.u64_bindings.empty() || n.args.size() != 4 || n.calls != 1)
    return false;
  for (int v : n.args) {
    if (v < 0) return false;
  }
  return kernel_registry().has("adamw_multi", n.device.type, n.dtype);
}

// What the merged node keeps: each member's stored arguments and its refreshes.
struct MergedAdamW {
  std::vector<std::shared_ptr<void>> args;
  std::vector<std::vector<std::function<void(void*)>>> refresh;
};

Node merged_node(const Graph& g, const std::vector<int>& members) {
  const Node& head = g.nodes[size_t(members.front())];
  Node m;
  m.op = "adamw_multi";
  m.device = head.device;
  m.dtype = head.dtype;
  m.kernel_type = std::type_index(typeid(AdamWMultiKernel));
  const AdamWMultiKernel kernel = kernel_registry().find<AdamWMultiKernel>("adamw_multi", head.device.type, head.dtype);
  m.kernel = reinterpret_cast<void (*)()>(kernel);
  m.attrs_comparable = false;
  m.calls = int(members.size());
  auto state = std::make_shared<MergedAdamW>();
  for (int i : members) {
    const Node& n = g.nodes[size_t(i)];
    m.args.insert(m.args.end(), n.args.begin(), n.args.end());
    m.written.insert(m.written.end(), n.written.begin(), n.written.end());
    m.read_versions.insert(m.read_versions.end(), n.read_versions.begin(), n.read_versions.end());
    m.dynamic = m.dynamic || n.dynamic;
    state->args.push_back(n.host_args);
    state->refresh.push_back(n.refresh);
  }
  if (m.dynamic) {
    m.refresh.push_back([](void* a) {
      auto& s = *static_cast<MergedAdamW*>(a);
      for (size_t k = 0; k < s.args.size(); ++k) {
        for (const auto& r : s.refresh[k]) r(s.args[k].get());
      }
    });
  }
  m.invoke = [kernel](void* a, Tensor* const* tensors) {
    auto& s = *static_cast<MergedAdamW*>(a);
    std::vector<AdamWUpdate> updates(s.args.size());
    for (size_t k = 0; k < s.args.size(); ++k) {
      auto& args = *static_cast<KernelArgs<AdamWKernel>*>(s.args[k].get());
      Tensor* const* t = tensors + 4 * k;  // the member's tensor arguments, in its order
      updates[k] = {t[std::get<0>(args)], t[std::get<1>(args)], t[std::get<2>(args)], t[std::get<3>(args)],
                    &std::get<4>(args)};
    }
    kernel(updates);
  };
  m.host_args = std::move(state);
  return m;
}

// An open run of updates of one device and dtype.
struct Run {
  std::vector<int> members;
  std::map<int, bool> buffers;  // the buffers the members touch: written by one?
  struct Range {
    int buffer;
    size_t begin, end;
    bool written;
  };
  std::vector<Range> ranges;
  bool frees = false;  // a member is the last use of an intermediate buffer
};

}  // namespace

Graph merge_adamw(const Graph& g) {
  const BufferSpans spans = buffer_spans(g);
  const std::vector<int>& first = spans.first;
  const std::vector<int>& last = spans.last;
  auto intermediate = [&](int b) { return g.buffers[size_t(b)].kind == BufferKind::intermediate; };
  std::vector<std::optional<Node>> placed(g.nodes.size());
  std::map<std::tuple<int, int, int>, Run> open;  // by (device type, device index, dtype)
  auto close = [&](const Run& r) {
    const int at = r.members.back();
    placed[size_t(at)] = r.members.size() == 1 ? g.nodes[size_t(at)] : merged_node(g, r.members);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::map<int, bool> touched;
    bool takes = false, frees = false;
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0) continue;
      const int b = buffer_of(g, n.args[a]);
      touched[b] = touched[b] || n.written[a];
      takes = takes || (intermediate(b) && first[size_t(b)] == int(i));
      frees = frees || (intermediate(b) && last[size_t(b)] == int(i));
    }
    const bool candidate = mergeable(n);
    const auto key = std::make_tuple(int(n.device.type), int(n.device.index), int(n.dtype));
    // End the runs whose members may not move past this call.
    for (auto it = open.begin(); it != open.end();) {
      const Run& r = it->second;
      bool ends = n.pinned || (r.frees && takes);
      if (candidate && it->first == key) {
        // It joins the run unless the two write the same elements: ranges, not whole buffers.
        for (size_t a = 0; a < n.args.size() && !ends; ++a) {
          const int b = buffer_of(g, n.args[a]);
          const auto [begin, end] = byte_range(g.values[size_t(n.args[a])]);
          for (const Run::Range& x : r.ranges) {
            if (x.buffer == b && (x.written || n.written[a]) && begin < x.end && x.begin < end) ends = true;
          }
        }
      } else {
        for (const auto& [b, w] : touched) {
          auto found = r.buffers.find(b);
          if (found != r.buffers.end() && (w || found->second)) ends = true;
        }
      }
      if (ends) {
        close(r);
        it = open.erase(it);
      } else {
        ++it;
      }
    }
    if (!candidate) {
      placed[i] = n;
      continue;
    }
    Run& r = open[key];
    r.members.push_back(int(i));
    for (size_t a = 0; a < n.args.size(); ++a) {
      const int b = buffer_of(g, n.args[a]);
      r.buffers[b] = r.buffers[b] || n.written[a];
      const auto [begin, end] = byte_range(g.values[size_t(n.args[a])]);
      r.ranges.push_back({b, begin, end, n.written[a]});
    }
    r.frees = r.frees || frees;
  }
  for (const auto& [key, r] : open) close(r);
  return with_calls(g, std::move(placed));
}

namespace {

// A node of `kernel` (registered as `op` for like's device and dtype), a kernel that takes many
// tensors: on each replay `call(kernel, tensors)` with the node's tensor arguments, in order.
template <class Fn>
Node many_tensor_node(const char* op, Fn kernel, const Node& like, std::vector<int> args, std::vector<bool> written,
                      std::vector<uint64_t> read_versions, int calls, void (*call)(Fn, size_t, Tensor* const*)) {
  Node m;
  m.op = op;
  m.device = like.device;
  m.dtype = like.dtype;
  m.kernel_type = std::type_index(typeid(Fn));
  m.kernel = reinterpret_cast<void (*)()>(kernel);
  const size_t members = args.size() - 1;  // the last argument is the one beside the many
  m.args = std::move(args);
  m.written = std::move(written);
  m.read_versions = std::move(read_versions);
  m.attrs_comparable = false;
  m.calls = calls;
  m.invoke = [kernel, members, call](void*, Tensor* const* tensors) { call(kernel, members, tensors); };
  return m;
}

bool is_zero_fill(const Node& n) {
  return is_kernel(n, typeid(FillKernel)) && n.args.size() == 1 && n.args[0] >= 0 && n.host_args &&
         std::get<1>(*static_cast<const KernelArgs<FillKernel>*>(n.host_args.get())) == 0.0;
}

bool is_sum_squares(const Node& n) {
  return n.op == "sum_squares" && is_kernel(n, typeid(SumSquaresKernel)) && n.args.size() == 2 && n.args[0] >= 0 &&
         n.args[1] >= 0;
}

}  // namespace

Graph merge_sum_squares(const Graph& g) {
  const CallTouches touches(g);
  std::vector<std::optional<Node>> placed(g.nodes.begin(), g.nodes.end());
  // Whether value v is a 0-dim f64 zero that a fill wrote and nothing writes later (common
  // subexpression elimination may have given it other readers: it stays for them).
  auto zero = [&](int v) {
    const int f = touches.first_writer(v);
    return f >= 0 && is_zero_fill(g.nodes[size_t(f)]) && touches.next_reader_of_own_write(v, f) >= 0 &&
           touches.value(v).dtype == DType::f64 && touches.value(v).sizes.empty();
  };
  // Pinned calls before each call: no member's read moves past one (a pipeline transfer).
  std::vector<int> pinned_before(g.nodes.size() + 1, 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) pinned_before[i + 1] = pinned_before[i] + int(g.nodes[i].pinned);
  // The sum_squares that wrote add a's operand other than `total`, for a alone; else -1.
  auto squares_into = [&](int a, int total) {
    const Node& add = g.nodes[size_t(a)];
    const int other = same_view(touches.value(add.args[0]), touches.value(total)) ? add.args[1] : add.args[0];
    const int sq = touches.only_writer_before(other, a);
    return sq >= 0 && is_sum_squares(g.nodes[size_t(sq)]) ? sq : -1;
  };
  for (int a0 = 0; a0 < int(g.nodes.size()); ++a0) {
    const Node& start = g.nodes[size_t(a0)];
    if (!placed[size_t(a0)] || !is_binary(start, "add")) continue;
    int total = zero(start.args[0]) ? start.args[0] : zero(start.args[1]) ? start.args[1] : -1;
    if (total < 0) continue;
    // zero -> add(zero, s1) -> t1 -> add(t1, s2) -> t2 ..., each s_k = sum_squares(x_k)
    std::vector<int> squares, adds;
    for (int a = a0; a >= 0;) {
      const Node& add = g.nodes[size_t(a)];
      const int sq = squares_into(a, total);
      if (sq < 0 || touches.value(add.args[2]).dtype != DType::f64) break;
      const Node& n = g.nodes[size_t(sq)];
      const Node& first = squares.empty() ? n : g.nodes[size_t(squares.front())];
      if (n.dtype != first.dtype || n.device != first.device || !is_contiguous(touches.value(n.args[0]))) break;
      squares.push_back(sq);
      bool unwritten = true;  // no member's tensor written before this add, where the merged call reads them all
      for (int k : squares) unwritten = unwritten && !touches.touched_between(g.nodes[size_t(k)].args[0], k, a, true);
      if (!unwritten || pinned_before[size_t(a)] != pinned_before[size_t(squares.front())]) {
        squares.pop_back();
        break;
      }
      adds.push_back(a);
      total = add.args[2];
      const int next = touches.only_other_toucher(total, a);
      a = next >= 0 && is_binary(g.nodes[size_t(next)], "add") ? next : -1;
    }
    if (squares.size() < 2 ||
        !kernel_registry().has("sum_squares_many", start.device.type, g.nodes[size_t(squares[0])].dtype))
      continue;
    std::vector<int> args;
    std::vector<bool> written;
    std::vector<uint64_t> versions;
    for (int k : squares) {
      args.push_back(g.nodes[size_t(k)].args[0]);
      written.push_back(false);
      versions.push_back(g.nodes[size_t(k)].read_versions[0]);
    }
    const Node& last = g.nodes[size_t(adds.back())];
    args.push_back(last.args[2]);
    written.push_back(true);
    versions.push_back(last.read_versions[2]);
    const Node& like = g.nodes[size_t(squares[0])];
    const auto kernel = kernel_registry().find<SumSquaresManyKernel>("sum_squares_many", like.device.type, like.dtype);
    for (int k : squares) placed[size_t(k)].reset();
    for (int a : adds) placed[size_t(a)].reset();
    placed[size_t(adds.back())] = many_tensor_node(
        "sum_squares_many", kernel, like, std::move(args), std::move(written), std::move(versions), int(squares.size()),
        +[](SumSquaresManyKernel k, size_t n, Tensor* const* t) { k(std::span<const Tensor* const>(t, n), *t[n]); });
  }
  return eliminate_dead_code(with_calls(g, std::move(placed)));  // the zero fills that only the merged chains read
}

Graph merge_scales(const Graph& g) {
  const CallTouches touches(g);
  auto one_element = [](const Value& v) { return shape_numel(v.sizes) == 1; };
  // A member: mul(x, view of c, x) in place, where c is one element of x's dtype that a cast wrote
  // from a one-element f64 value, or (f64 x) that f64 value itself: the factor.
  struct Member {
    int node, x, factor;
    uint64_t factor_version;  // the writes the factor's buffer had when it was read
  };
  auto member = [&](int i) -> std::optional<Member> {
    const Node& n = g.nodes[size_t(i)];
    if (!is_binary(n, "mul") || (n.dtype != DType::f32 && n.dtype != DType::f64)) return std::nullopt;
    const Value &x = touches.value(n.args[0]), &out = touches.value(n.args[2]);
    if (!same_view(x, out) || !is_contiguous(x)) return std::nullopt;
    const int w = touches.first_writer(n.args[1]);
    if (w < 0 || w >= i || touches.next_reader_of_own_write(n.args[1], w) < 0) return std::nullopt;
    const Node& writer = g.nodes[size_t(w)];
    int c = -1;  // the one-element value the writer wrote
    for (size_t a = 0; a < writer.args.size(); ++a) {
      if (writer.args[a] >= 0 && writer.written[a] && touches.value(writer.args[a]).buffer == touches.value(n.args[1]).buffer)
        c = writer.args[a];
    }
    if (c < 0 || !one_element(touches.value(c)) || touches.value(c).dtype != n.dtype) return std::nullopt;
    const int factor = n.dtype == DType::f64 ? c : is_cast(writer) ? writer.args[0] : -1;
    if (factor < 0 || touches.value(factor).dtype != DType::f64 || !one_element(touches.value(factor)) ||
        x.buffer == touches.value(c).buffer || x.buffer == touches.value(factor).buffer ||
        touches.touched_between(factor, w, i, true))  // the merged call reads the factor later
      return std::nullopt;
    return Member{i, n.args[0], factor, factor == c ? n.read_versions[1] : writer.read_versions[0]};
  };
  // Open runs by (factor's buffer, dtype), each with its members' buffers; a run ends at a call that touches
  // one of them or writes the f64 factor (its members could not move past it), or a pinned call.
  struct Run {
    std::vector<Member> members;
    std::set<int> buffers;
  };
  std::vector<std::vector<Member>> runs;
  std::map<std::tuple<int, int>, Run> open;
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& n = g.nodes[size_t(i)];
    const std::optional<Member> m = member(i);
    for (auto& [key, run] : open) {
      bool ends = n.pinned;
      for (size_t a = 0; a < n.args.size() && !ends; ++a) {
        if (n.args[a] < 0) continue;
        const int b = touches.value(n.args[a]).buffer;
        ends = run.buffers.count(b) || (n.written[a] && b == std::get<0>(key));  // the key's factor buffer
      }
      if (!ends) continue;
      if (run.members.size() > 1) runs.push_back(run.members);
      run = Run{};
    }
    if (!m) continue;
    Run& run = open[{touches.value(m->factor).buffer, int(n.dtype)}];
    run.members.push_back(*m);
    run.buffers.insert(touches.value(m->x).buffer);
  }
  for (auto& [key, run] : open) {
    if (run.members.size() > 1) runs.push_back(run.members);
  }
  std::vector<std::optional<Node>> placed(g.nodes.begin(), g.nodes.end());
  for (const std::vector<Member>& run : runs) {
    const Node& last = g.nodes[size_t(run.back().node)];
    if (!kernel_registry().has("scale_many", last.device.type, last.dtype)) continue;
    std::vector<int> args;
    std::vector<bool> written;
    std::vector<uint64_t> versions;
    for (const Member& r : run) {
      args.push_back(r.x);
      written.push_back(true);
      versions.push_back(g.nodes[size_t(r.node)].read_versions[0]);
      placed[size_t(r.node)].reset();
    }
    args.push_back(run[0].factor);
    written.push_back(false);
    versions.push_back(run[0].factor_version);
    const auto kernel = kernel_registry().find<ScaleManyKernel>("scale_many", last.device.type, last.dtype);
    placed[size_t(run.back().node)] = many_tensor_node(
        "scale_many", kernel, last, std::move(args), std::move(written), std::move(versions), int(run.size()),
        +[](ScaleManyKernel k, size_t n, Tensor* const* t) { k(std::span<Tensor* const>(t, n), *t[n]); });
  }
  return eliminate_dead_code(with_calls(g, std::move(placed)));  // the casts that only the merged calls read
}

}  // namespace trireme::graph
