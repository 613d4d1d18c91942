// The elementwise fusion pass.
#include "trireme/graph/fusion.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/kernels/registry.h"

namespace trireme::graph {
namespace {

// Members of a group lie at most this many calls apart: moving a call further down would keep
// its inputs alive longer than fusion saves, and the legality check looks at every call between.
constexpr int kMaxSpan = 64;
// Slots and tensors a program may have (registers per thread on the GPU, tiles per thread on the CPU).
constexpr size_t kMaxSlots = 24;
constexpr size_t kMaxTensors = 12;

bool floating(DType t) { return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A call as a fusion candidate: its op, the values it reads and the one it writes.
struct Pointwise {
  PointwiseOp op;
  std::vector<int> reads;
  int write = -1;
  double alpha = 0;
};

std::optional<Pointwise> pointwise(const Graph& g, const Node& n) {
  if (!rewritable(n) || !n.host_args) return std::nullopt;
  const std::optional<PointwiseOp> op = pointwise_op_named(n.op);
  if (!op || !floating(n.dtype)) return std::nullopt;
  const std::type_index want = *op == PointwiseOp::copy ? std::type_index(typeid(CopyKernel))
                               : is_unary(*op)          ? std::type_index(typeid(UnaryKernel))
                                                        : std::type_index(typeid(BinaryKernel));
  if (n.kernel_type != want) return std::nullopt;
  const size_t arity = size_t(pointwise_arity(*op));
  if (n.args.size() != arity + 1 || !n.written[arity]) return std::nullopt;
  Pointwise p{*op, {}, n.args[arity], 0};
  for (size_t a = 0; a < arity; ++a) {
    if (n.written[a] || n.args[a] < 0) return std::nullopt;
    p.reads.push_back(n.args[a]);
  }
  if (p.write < 0) return std::nullopt;
  const Value& out = g.values[size_t(p.write)];
  if (out.dtype != n.dtype || !is_contiguous(out) || out.sizes.size() > 16) return std::nullopt;
  for (int r : p.reads) {
    const Value& in = g.values[size_t(r)];
    if (in.sizes != out.sizes || !floating(in.dtype)) return std::nullopt;
    if (*op != PointwiseOp::copy && in.dtype != n.dtype) return std::nullopt;
    if (g.buffers[size_t(in.buffer)].device != n.device) return std::nullopt;
  }
  if (g.buffers[size_t(out.buffer)].device != n.device) return std::nullopt;
  if (is_unary(*op)) p.alpha = std::get<2>(*static_cast<KernelArgs<UnaryKernel>*>(n.host_args.get()));
  return p;
}

// Whether two calls touch a common buffer where either writes (their order matters).
bool conflict(const Graph& g, const Node& a, const Node& b) {
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (a.args[i] < 0) continue;
    const int ba = g.values[size_t(a.args[i])].buffer;
    for (size_t j = 0; j < b.args.size(); ++j) {
      if (b.args[j] < 0 || g.values[size_t(b.args[j])].buffer != ba) continue;
      if (a.written[i] || b.written[j]) return true;
    }
  }
  return false;
}

struct Built {
  FusedProgram program;
  std::vector<int> in_values, out_values;
  std::vector<uint64_t> in_versions;
};

// The program of a group (members in graph order), or nothing when its members cannot run as one
// loop: a buffer read through two views of which one is written, too many slots.
std::optional<Built> build(const Graph& g, const std::vector<int>& members, const std::vector<std::optional<Pointwise>>& pw,
                           const std::vector<std::vector<int>>& touching) {
  Built b;
  FusedProgram& p = b.program;
  std::map<int, std::pair<int, int>> written;  // buffer -> (value, slot) of the group's latest write
  std::map<int, int> external;                 // buffer read before any write in the group -> value
  std::vector<std::pair<int, uint64_t>> inputs;  // (value, version)
  struct PendingStep {
    FusedStep step;      // in[r]: an input's index when from_input[r], else an earlier step's
    bool from_input[2] = {false, false};
  };
  std::vector<PendingStep> pending;
  for (int m : members) {
    const Node& n = g.nodes[size_t(m)];
    const Pointwise& q = *pw[size_t(m)];
    PendingStep ps;
    ps.step.op = q.op;
    ps.step.alpha = q.alpha;
    for (size_t r = 0; r < q.reads.size(); ++r) {
      const Value& v = g.values[size_t(q.reads[r])];
      if (auto it = written.find(v.buffer); it != written.end()) {
        if (!same_view(g.values[size_t(it->second.first)], v)) return std::nullopt;
        ps.step.in[r] = it->second.second;
        continue;
      }
      external.emplace(v.buffer, q.reads[r]);
      int k = -1;
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (same_view(g.values[size_t(inputs[i].first)], v)) k = int(i);
      }
      if (k < 0) {
        k = int(inputs.size());
        inputs.emplace_back(q.reads[r], n.read_versions.size() > r ? n.read_versions[r] : 0);
      }
      ps.step.in[r] = k;
      ps.from_input[r] = true;
    }
    const Value& w = g.values[size_t(q.write)];
    if (auto it = written.find(w.buffer); it != written.end() && !same_view(g.values[size_t(it->second.first)], w))
      return std::nullopt;
    for (const auto& [value, version] : inputs) {  // a buffer the group reads and writes: one view, read first
      if (g.values[size_t(value)].buffer == w.buffer && !same_view(g.values[size_t(value)], w)) return std::nullopt;
    }
    written[w.buffer] = {q.write, int(pending.size())};
    pending.push_back(ps);
  }
  const int ni = int(inputs.size());
  p.inputs = ni;
  for (const auto& [value, version] : inputs) {
    p.slot_dtype.push_back(g.values[size_t(value)].dtype);
    p.input_strides.push_back(g.values[size_t(value)].strides);
    b.in_values.push_back(value);
    b.in_versions.push_back(version);
  }
  for (size_t s = 0; s < pending.size(); ++s) {
    FusedStep st = pending[s].step;
    st.out = ni + int(s);
    for (int r = 0; r < 2; ++r) {
      if (st.in[r] >= 0 && !pending[s].from_input[r]) st.in[r] += ni;
    }
    p.steps.push_back(st);
    p.slot_dtype.push_back(g.values[size_t(pw[size_t(members[s])]->write)].dtype);
    if (!p.name.empty()) p.name += "+";
    p.name += pointwise_op_name(st.op);
  }
  // Outputs: the last write of every buffer that a call outside the group, or the caller, sees.
  for (const auto& [buffer, vs] : written) {
    bool internal = g.buffers[size_t(buffer)].kind == BufferKind::intermediate && !external.count(buffer);
    for (int t : touching[size_t(buffer)]) {
      if (!std::binary_search(members.begin(), members.end(), t)) internal = false;
    }
    if (internal) continue;
    p.outputs.push_back(ni + vs.second);
    b.out_values.push_back(vs.first);
  }
  p.sizes = g.values[size_t(pw[size_t(members.back())]->write)].sizes;
  if (p.slot_dtype.size() > kMaxSlots || b.in_values.size() + b.out_values.size() > kMaxTensors) return std::nullopt;
  return b;
}

// Whether every member may move down to the last one: no call between a member and the last,
// outside the group, touches a buffer the member touches where either writes.
bool movable(const Graph& g, const std::vector<int>& members) {
  if (members.back() - members.front() > kMaxSpan) return false;
  for (size_t i = 0; i + 1 < members.size(); ++i) {
    size_t next = i + 1;
    for (int x = members[i] + 1; x < members.back(); ++x) {
      while (next < members.size() && members[next] < x) ++next;
      if (next < members.size() && members[next] == x) continue;
      if (g.nodes[size_t(x)].pinned || conflict(g, g.nodes[size_t(members[i])], g.nodes[size_t(x)])) return false;
    }
  }
  return true;
}

struct FusedCall {
  FusedProgram program;
  FusedElementwiseKernel kernel;
};

}  // namespace

const FusedProgram* fused_program(const Node& n) {
  if (n.kernel_type != std::type_index(typeid(FusedElementwiseKernel)) || !n.host_args) return nullptr;
  return &static_cast<const FusedCall*>(n.host_args.get())->program;
}

Graph fuse_elementwise(const Graph& g) {
  const size_t nn = g.nodes.size();
  std::vector<std::optional<Pointwise>> pw(nn);
  for (size_t i = 0; i < nn; ++i) {
    if (kernel_registry().has("fused_elementwise", g.nodes[i].device.type, g.nodes[i].dtype)) pw[i] = pointwise(g, g.nodes[i]);
  }
  std::vector<std::vector<int>> touching(g.buffers.size());
  std::vector<int> writers(g.buffers.size(), 0);
  for (size_t i = 0; i < nn; ++i) {
    const Node& n = g.nodes[i];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0) continue;
      const int b = g.values[size_t(n.args[a])].buffer;
      if (touching[size_t(b)].empty() || touching[size_t(b)].back() != int(i)) touching[size_t(b)].push_back(int(i));
      writers[size_t(b)] += n.written[a];
    }
  }
  // Groups, as sorted member lists; group_of[i] indexes them (-1: alone).
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of(nn, -1);
  auto members_of = [&](int node) { return group_of[size_t(node)] < 0 ? std::vector<int>{node} : groups[size_t(group_of[size_t(node)])]; };
  // Each intermediate buffer written once by a candidate and read only by candidates of its shape
  // links its writer to its readers. A link refused now may be accepted once the calls between
  // have joined (a chain's first result read again at its end), so the links are tried until
  // none is accepted.
  std::vector<bool> linked(g.buffers.size(), false);
  for (bool merged_any = true; merged_any;) {
    merged_any = false;
    for (size_t b = 0; b < g.buffers.size(); ++b) {
      const std::vector<int>& t = touching[b];
      if (linked[b] || g.buffers[b].kind != BufferKind::intermediate || writers[b] != 1 || t.size() < 2) continue;
      const int producer = t.front();
      if (!pw[size_t(producer)] || g.values[size_t(pw[size_t(producer)]->write)].buffer != int(b)) continue;
      const Value& made = g.values[size_t(pw[size_t(producer)]->write)];
      bool ok = true;
      for (size_t k = 1; k < t.size() && ok; ++k) {
        const auto& q = pw[size_t(t[k])];
        ok = q.has_value() && g.values[size_t(q->write)].sizes == made.sizes &&
             g.nodes[size_t(t[k])].device == g.nodes[size_t(producer)].device;
      }
      if (!ok) continue;
      std::vector<int> merged;
      for (int node : t) {
        for (int m : members_of(node)) merged.push_back(m);
      }
      std::sort(merged.begin(), merged.end());
      merged.erase(std::unique(merged.begin(), merged.end()), merged.end());
      if (!movable(g, merged) || !build(g, merged, pw, touching)) continue;
      const int id = int(groups.size());
      for (int m : merged) {
        if (group_of[size_t(m)] >= 0) groups[size_t(group_of[size_t(m)])].clear();
      }
      groups.push_back(merged);
      for (int m : merged) group_of[size_t(m)] = id;
      linked[b] = true;
      merged_any = true;
    }
  }
  // Prepare each group's kernel; the group replaces its members at the place of its last one.
  std::vector<std::optional<Node>> fused_at(nn);
  std::vector<bool> absorbed(nn, false);
  for (const std::vector<int>& members : groups) {
    if (members.size() < 2) continue;
    Built b = *build(g, members, pw, touching);
    const Node& last = g.nodes[size_t(members.back())];
    const DType key = last.dtype;
    auto prepare = kernel_registry().find<FusedPrepareKernel>("fused_prepare", last.device.type, key);
    std::string error;
    prepare(b.program, last.device, error);
    if (!error.empty()) {  // one line: the compiler's log, if long, is cut
      std::replace(error.begin(), error.end(), '\n', ' ');
      if (error.size() > 400) error = error.substr(0, 400) + " ...";
      std::fprintf(stderr, "trireme: fusion: the group %s on %s stays unfused: %s\n", b.program.name.c_str(),
                   str_cat(last.device).c_str(), error.c_str());
      continue;
    }
    auto call = std::make_shared<FusedCall>();
    call->kernel = kernel_registry().find<FusedElementwiseKernel>("fused_elementwise", last.device.type, key);
    call->program = std::move(b.program);
    Node n;
    n.op = "fused:" + call->program.name;
    n.device = last.device;
    n.dtype = key;
    n.kernel_type = std::type_index(typeid(FusedElementwiseKernel));
    n.kernel = reinterpret_cast<void (*)()>(call->kernel);
    n.args = b.in_values;
    n.written.assign(b.in_values.size(), false);
    n.read_versions = b.in_versions;
    for (int v : b.out_values) {
      n.args.push_back(v);
      n.written.push_back(true);
      n.read_versions.push_back(0);
    }
    n.attrs_comparable = false;
    n.host_args = call;
    n.invoke = [](void* a, Tensor* const* tensors) {
      const FusedCall& c = *static_cast<const FusedCall*>(a);
      c.kernel(c.program, tensors);
    };
    for (int m : members) absorbed[size_t(m)] = true;
    fused_at[size_t(members.back())] = std::move(n);
  }
  Graph out = g;
  out.nodes.clear();
  for (size_t i = 0; i < nn; ++i) {
    if (fused_at[i]) {
      out.nodes.push_back(std::move(*fused_at[i]));
    } else if (!absorbed[i]) {
      out.nodes.push_back(g.nodes[i]);
    }
  }
  return out;
}

}  // namespace trireme::graph
