// Text and dot renderings of a graph.
#include "trireme/graph/dump.h"

#include "trireme/graph/fusion.h"

#include <sstream>

namespace trireme::graph {

std::map<std::string, int64_t> op_counts(const Graph& g) {
  std::map<std::string, int64_t> out;
  for (const Node& n : g.nodes) ++out[n.op];
  return out;
}

std::string list_nodes(const Graph& g) {
  std::ostringstream os;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << i << "  " << n.op << " " << dtype_name(n.dtype) << (n.dynamic ? " (host args per replay)" : "") << "  (";
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (a) os << ", ";
      if (n.args[a] < 0) {
        os << "-";
        continue;
      }
      const Value& v = g.values[size_t(n.args[a])];
      os << (n.written[a] ? "w:" : "") << "v" << n.args[a] << "=" << buffer_kind_name(g.buffers[size_t(v.buffer)].kind)[0]
         << v.buffer << v.sizes;
    }
    os << ")\n";
  }
  return os.str();
}

std::string describe_fusion(const Graph& g) {
  struct Seen {
    int64_t count = 0;
    size_t steps = 0, inputs = 0, outputs = 0;
  };
  std::map<std::string, Seen> by_program;
  int64_t calls = 0, replaced = 0;
  for (const Node& n : g.nodes) {
    const FusedProgram* p = fused_program(n);
    if (p == nullptr) continue;
    Seen& s = by_program[str_cat(p->name, " ", dtype_name(n.dtype))];
    ++s.count;
    s.steps = p->steps.size();
    s.inputs = size_t(p->inputs);
    s.outputs = p->outputs.size();
    ++calls;
    replaced += int64_t(p->steps.size());
  }
  if (calls == 0) return {};
  std::ostringstream os;
  os << "\nfused elementwise calls: " << calls << ", replacing " << replaced << " calls (" << replaced - calls
     << " fewer per step)\n";
  for (const auto& [name, s] : by_program) {
    os << "  " << s.count << " x " << name << "  (" << s.inputs << " in, " << s.outputs << " out)\n";
  }
  return os.str();
}

std::string to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph step {\n  node [shape=box, fontsize=10];\n";
  std::vector<int> last_writer(g.buffers.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << "  n" << i << " [label=\"" << i << ": " << n.op << "\"];\n";
    std::vector<int> from;
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0 || n.written[a]) continue;
      const int w = last_writer[size_t(g.values[size_t(n.args[a])].buffer)];
      if (w >= 0 && std::find(from.begin(), from.end(), w) == from.end()) from.push_back(w);
    }
    for (int w : from) os << "  n" << w << " -> n" << i << ";\n";
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] >= 0 && n.written[a]) last_writer[size_t(g.values[size_t(n.args[a])].buffer)] = int(i);
    }
  }
  os << "}\n";
  return os.str();
}

std::string describe_memory(const Graph& g, const MemoryPlan& plan) {
  std::map<BufferKind, std::pair<int64_t, size_t>> kinds;
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    if (plan.first[b] < 0 && g.buffers[b].kind == BufferKind::intermediate) continue;  // untouched after the passes
    auto& [count, bytes] = kinds[g.buffers[b].kind];
    ++count;
    bytes += g.buffers[b].nbytes;
  }
  std::ostringstream os;
  for (const auto& [kind, cb] : kinds) os << "  " << buffer_kind_name(kind) << ": " << cb.first << " buffers, " << cb.second << " bytes\n";
  os << "  arena: " << plan.arena_bytes << " bytes for " << plan.planned_buffers << " intermediates of "
     << plan.intermediate_bytes << " bytes\n";
  os << "  eager peak of the step's own allocations: " << g.eager_peak_bytes << " bytes\n";
  return os.str();
}

}  // namespace trireme::graph
