// Executable: a graph ready to replay. Intermediates live in one arena placed by plan_memory, at
// addresses fixed for the executable's lifetime; a replay runs the graph's host steps, recomputes
// the host arguments that are inputs of the graph, then calls the kernels in order on the bound
// tensors: no autograd, no allocation but the outputs', no checks beyond the input guard.
#pragma once

#include <memory>
#include <vector>

#include "trireme/graph/graph.h"
#include "trireme/graph/passes.h"

namespace trireme::graph {

class Executable {
 public:
  explicit Executable(Graph g);

  // Inputs must match the traced ones' shapes, strides, dtypes and devices (matches()).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  bool matches(const std::vector<Tensor>& inputs) const;

  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  const std::vector<InputSpec>& input_specs() const { return specs_; }

 private:
  Tensor make_value(int v, const StoragePtr& storage, int64_t offset_shift) const;

  Graph g_;
  MemoryPlan plan_;
  std::vector<InputSpec> specs_;
  std::vector<int64_t> traced_input_offsets_;
  StoragePtr arena_;
  std::vector<Tensor> values_;                  // per value: the tensor the kernels receive
  std::vector<std::vector<int>> values_of_buffer_;
  std::vector<std::vector<Tensor*>> node_args_;  // per node: pointers into values_
  Tensor undefined_;
};

}  // namespace trireme::graph
