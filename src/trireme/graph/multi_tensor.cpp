// The multi-tensor AdamW pass (multi_tensor.h).
#include "trireme/graph/multi_tensor.h"

#include <map>
#include <optional>
#include <tuple>

#include "trireme/graph/passes.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"

namespace trireme::graph {
namespace {

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
  Graph out = g;
  out.nodes.clear();
  for (auto& n : placed) {
    if (n) out.nodes.push_back(std::move(*n));
  }
  return out;
}

}  // namespace trireme::graph
