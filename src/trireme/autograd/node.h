// The autograd graph: nodes with edges (node, input_nr) to the nodes that produced their inputs.
// A node maps the gradients of its outputs to the gradients of its inputs (one per edge).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null when the input needs no gradient
  uint32_t input_nr = 0;     // which output of `fn` the input was
  bool valid() const { return fn != nullptr; }
};

using TensorList = std::vector<Tensor>;

class Node {
 public:
  explicit Node(std::string name, uint32_t num_outputs = 1);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grad_outputs[i] is the gradient of output i (undefined if nothing flowed into it).
  // Returns one gradient per next edge (undefined where the input needs none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Drops saved tensors after a backward pass that does not retain the graph.
  virtual void release_saved() {}

  const std::string& name() const { return name_; }
  uint32_t num_outputs() const { return num_outputs_; }
  // Creation order: the engine runs later nodes first, which is reverse topological order and
  // makes the last layers' gradients ready first (what overlapped reduction wants).
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }

 private:
  std::string name_;
  uint32_t num_outputs_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
};

// A tensor saved for backward, with the version it had then. Stored detached (no grad_fn), so a
// node that saves its own output makes no reference cycle. A tensor marked for selective
// recomputation (recompute_when_saved, checkpoint.h) is saved as its recipe instead and computed
// again, once, when the backward first unpacks it.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Throws if the tensor was modified in place since it was saved.
  const Tensor& unpack(const std::string& node_name) const;
  bool defined() const { return tensor_.defined() || recompute_ != nullptr; }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  std::function<Tensor()> recompute_;
  mutable Tensor recomputed_;
};

// The backward of one op as a lambda: saved tensors live in its captures, so releasing the
// saved state is dropping the lambda.
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

class LambdaNode final : public Node {
 public:
  LambdaNode(std::string name, uint32_t num_outputs, BackwardFn fn)
      : Node(std::move(name), num_outputs), fn_(std::move(fn)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  void release_saved() override { fn_ = nullptr; }

 private:
  BackwardFn fn_;
};

// Accumulates into a leaf's .grad, then runs its grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  TensorList apply(TensorList&& grad_outputs) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and some input requires grad: the op must record a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// The edge that gradients for `t` flow into (its grad_fn, or its leaf accumulator).
Edge edge_for(const Tensor& t);

// Records `fn` as the backward of an op with these inputs and outputs: the outputs get the new
// node as grad_fn and require grad. Call only when any_requires_grad(inputs).
//   record("mul", {&a, &b}, {&out}, [sa = SavedTensor(a), ...](const TensorList& g) {...});
void record(const char* name, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn);
void record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn fn);

}  // namespace trireme::autograd
