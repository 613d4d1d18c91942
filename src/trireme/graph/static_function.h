// StaticFunction: a function of tensors that runs as a replayed graph. The first call with a
// given input signature (shapes, strides, dtypes, devices: the guard) traces the function (it
// runs eagerly while recording), later calls with that signature replay the graph; a call with
// another signature traces another graph, kept beside the first (a retrace, counted). More than
// max_graphs signatures is an error: the inputs change shape every call.
//
//   graph::StaticFunction step([&](const std::vector<Tensor>& in) { ...; return {loss}; });
//   Tensor loss = step({x, y})[0];
#pragma once

#include <memory>
#include <vector>

#include "trireme/graph/executable.h"
#include "trireme/graph/trace.h"

namespace trireme::graph {

struct StaticOptions {
  int max_graphs = 8;
  bool dead_code = true;
  bool common_subexpressions = true;
  bool schedule_for_memory = true;
  bool fold_into_norms = true;   // casts and gradient adds (graph/norm_folds.h)
  bool fold_into_gemms = true;   // GELU and its gradient (graph/gemm_folds.h)
  bool fuse_elementwise = true;  // graph/fusion.h
  // Merge the AdamW updates into multi-tensor calls (multi_tensor.h: merge_adamw).
  bool multi_tensor_adamw = true;
  // Merge gradient clipping's per-tensor calls (multi_tensor.h: merge_sum_squares, merge_scales).
  bool multi_tensor_clip = true;
  // On a CUDA device, replay as CUDA graphs (executable.h: ReplayOptions); off to compare.
  bool cuda_graph = true;
  TraceOptions trace;
};

// The passes StaticFunction runs, in order: what a traced graph becomes before it is planned.
Graph optimize(const Graph& g, const StaticOptions& o = {});

class StaticFunction {
 public:
  explicit StaticFunction(StepFn fn, StaticOptions options = {});

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  int64_t traces() const { return traces_; }      // graphs traced (the first and every retrace)
  int64_t retraces() const { return traces_ > 0 ? traces_ - 1 : 0; }
  int64_t replays() const { return replays_; }
  // The executable the last call ran or traced.
  const Executable* last() const { return last_; }

 private:
  StepFn fn_;
  StaticOptions options_;
  std::vector<std::unique_ptr<Executable>> graphs_;
  Executable* last_ = nullptr;
  int64_t traces_ = 0, replays_ = 0;
};

}  // namespace trireme::graph
