// Executable: a graph ready to replay. Intermediates live in one arena placed by plan_memory, at
// addresses fixed for the executable's lifetime; a replay runs the graph's host steps, recomputes
// the host arguments that are inputs of the graph, then calls the kernels in order on the bound
// tensors: no autograd, no allocation but the outputs', no checks beyond the input guard. On a
// CUDA device the first replay captures the kernel calls into CUDA graphs and later replays
// launch them (cuda_replay.h; docs/STATIC_GRAPH.md).
#pragma once

#include <memory>
#include <vector>

#include "trireme/graph/graph.h"
#include "trireme/graph/passes.h"

namespace trireme::graph {

class CudaReplay;

struct ReplayOptions {
  // On a CUDA device: capture the replay into CUDA graphs once and launch them at every replay.
  // Off: every replay calls the kernels one by one (the same results, bit for bit).
  bool cuda_graph = true;
};

// What a CUDA-graph replay captured (all 0 when the replay is not captured).
struct CaptureSummary {
  int graphs = 0;          // CUDA graphs launched per replay
  int captured_calls = 0;  // kernel calls inside them
  int outside_calls = 0;   // calls run between them: collectives, transfers, calls a capture refused
  size_t cuda_nodes = 0;   // the CUDA graphs' nodes
  size_t pool_bytes = 0;   // device memory the kernels allocated while captured (kept for the graphs)
};

class Executable {
 public:
  explicit Executable(Graph g, ReplayOptions options = {});
  ~Executable();

  // Inputs must match the traced ones' shapes, strides, dtypes and devices (matches()).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  bool matches(const std::vector<Tensor>& inputs) const;

  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  const std::vector<InputSpec>& input_specs() const { return specs_; }
  CaptureSummary capture_summary() const;

 private:
  friend class CudaGraphReplay;  // cuda_replay.cpp
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
  ReplayOptions options_;
  bool capture_tried_ = false;
  std::unique_ptr<CudaReplay> cuda_;  // last: destroyed (its graphs waited for) before the arena
};

}  // namespace trireme::graph
