// The backward engine.
#include "trireme/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/grad_arithmetic.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"

namespace trireme::autograd {
namespace {

struct ByLatestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TRIREME_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(),
                " roots but ", grads.size(), " gradients");
  GradModeGuard no_grad(false);
  AutocastOffGuard no_autocast;  // gradients flow in the dtypes the forward used

  // Seed gradients, per (node, output).
  std::unordered_map<Node*, TensorList> buffers;
  // Strong references to every node from when it is reached until it has run: a node's inputs'
  // nodes are otherwise owned only by its edges, and a leaf's accumulator only by the graph.
  std::unordered_map<Node*, std::shared_ptr<Node>> pending;
  std::vector<Node*> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TRIREME_CHECK(root.requires_grad(), "backward: tensor ", root.sizes(), " does not require grad ",
                  "(no parameter that requires grad was used to compute it, or grad mode was off)");
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      TRIREME_CHECK(root.numel() == 1, "backward: an implicit gradient needs a scalar output, got shape ",
                    root.sizes(), "; pass the output gradient explicitly");
      g = grad_ones_like(root);
    }
    TRIREME_CHECK(g.sizes() == root.sizes(), "backward: gradient shape ", g.sizes(), " does not match output ",
                  root.sizes());
    Edge e = edge_for(root);
    pending.try_emplace(e.fn.get(), e.fn);
    TensorList& buf = buffers[e.fn.get()];
    buf.resize(e.fn->num_outputs());
    buf[e.input_nr] = buf[e.input_nr].defined() ? grad_sum(buf[e.input_nr], g, "backward") : g;
    starts.push_back(e.fn.get());
  }

  // Count, for each node, how many edges lead into it from the part of the graph we run.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack(starts.begin(), starts.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++dependencies[e.fn.get()];
      stack.push_back(e.fn.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ByLatestFirst> ready;
  std::unordered_set<Node*> started;
  for (Node* n : starts) {
    if (dependencies[n] == 0 && started.insert(n).second) ready.push(n);
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList grads_in = std::move(buffers[node]);
    buffers.erase(node);
    grads_in.resize(node->num_outputs());
    TensorList grads_out = node->apply(std::move(grads_in));
    if (!retain_graph) node->release_saved();

    const auto& edges = node->next_edges();
    TRIREME_CHECK(grads_out.empty() || grads_out.size() == edges.size(), node->name(), ": backward returned ",
                  grads_out.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      if (i < grads_out.size() && grads_out[i].defined()) {
        TensorList& buf = buffers[next];
        buf.resize(next->num_outputs());
        Tensor& slot = buf[e.input_nr];
        slot = slot.defined() ? grad_sum(slot, grads_out[i], next->name().c_str()) : std::move(grads_out[i]);
      }
      pending.try_emplace(next, e.fn);
      if (--dependencies[next] == 0) ready.push(next);
    }
    pending.erase(node);
  }
}

}  // namespace trireme::autograd

namespace trireme {
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}
}  // namespace trireme
