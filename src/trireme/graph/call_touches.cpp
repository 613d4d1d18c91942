// Which calls touch which buffers, for the folds.
#include "trireme/graph/call_touches.h"

#include "trireme/kernels/elementwise.h"

namespace trireme::graph {

CallTouches::CallTouches(const Graph& g) : g_(g), touching_(g.buffers.size()) {
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& n = g.nodes[size_t(i)];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (n.args[a] < 0) continue;
      auto& t = touching_[size_t(g.values[size_t(n.args[a])].buffer)];
      if (!t.empty() && t.back().first == i) {
        t.back().second = t.back().second || n.written[a];
      } else {
        t.emplace_back(i, n.written[a]);
      }
    }
  }
}

int CallTouches::only_other_toucher(int v, int call) const {
  const int buffer = value(v).buffer;
  const auto& t = touching_[size_t(buffer)];
  if (g_.buffers[size_t(buffer)].kind != BufferKind::intermediate || t.size() != 2 || t[0].first != call || !t[0].second)
    return -1;
  return t[1].first;
}

int CallTouches::only_writer_before(int v, int call) const {
  const int buffer = value(v).buffer;
  const auto& t = touching_[size_t(buffer)];
  if (g_.buffers[size_t(buffer)].kind != BufferKind::intermediate || t.size() != 2 || t[1].first != call || t[1].second ||
      !t[0].second)
    return -1;
  return t[0].first;
}

int CallTouches::first_writer(int v) const {
  const int buffer = value(v).buffer;
  const auto& t = touching_[size_t(buffer)];
  if (g_.buffers[size_t(buffer)].kind != BufferKind::intermediate || t.empty() || !t[0].second) return -1;
  return t[0].first;
}

int CallTouches::next_reader_of_own_write(int v, int call) const {
  const int buffer = value(v).buffer;
  const auto& t = touching_[size_t(buffer)];
  if (g_.buffers[size_t(buffer)].kind != BufferKind::intermediate || t.size() < 2 || t[0].first != call || !t[0].second)
    return -1;
  for (size_t k = 1; k < t.size(); ++k) {
    if (t[k].second) return -1;
  }
  return t[1].first;
}

bool CallTouches::touched_between(int v, int from, int to, bool writes_only) const {
  for (const auto& [i, writes] : touching_[size_t(value(v).buffer)]) {
    if (i > from && i < to && (writes || !writes_only)) return true;
  }
  return false;
}

bool is_kernel(const Node& n, std::type_index kernel) { return n.kernel_type == kernel && rewritable(n); }

bool is_cast(const Node& n) {
  return is_kernel(n, typeid(CopyKernel)) && n.args.size() == 2 && n.args[0] >= 0 && n.args[1] >= 0;
}

bool is_binary(const Node& n, std::string_view op) {
  return n.op == op && is_kernel(n, typeid(BinaryKernel)) && n.args.size() == 3 && n.args[0] >= 0 && n.args[1] >= 0 &&
         n.args[2] >= 0;
}

Graph without_dropped(const Graph& g, std::vector<Node> nodes, const std::vector<bool>& dropped) {
  Graph out = g;
  out.nodes.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!dropped[i]) out.nodes.push_back(std::move(nodes[i]));
  }
  return out;
}

}  // namespace trireme::graph
