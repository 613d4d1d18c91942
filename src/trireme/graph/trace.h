// Tracing: runs a function of tensors once, eagerly, while recording every kernel it calls into
// a Graph (graph.h). The function is ordinary model code: forward, backward, clipping, an
// optimizer step; nothing in it is written for tracing.
//
// What a trace refuses, with an error naming the op or the access (never wrong numbers later):
//   - host code reading a value the step computed (Tensor::item(), at(), data_ptr() outside a
//     kernel): the value would be baked into the graph. Return it as an output instead.
//   - an op that draws random numbers (TraceOptions::random_ops) from a stream that is not an
//     input of the trace (KernelTape::bind_u64): its mask would repeat at every replay.
//   - a tensor created inside the step that is still alive after it (state the step creates, e.g.
//     an optimizer's moments on its first step: a replay would create it again). Run the step
//     once eagerly before tracing it.
//   - an output that is undefined, or two inputs sharing memory.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trireme/graph/graph.h"

namespace trireme::graph {

using StepFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct TraceOptions {
  std::vector<std::string> random_ops = {"dropout"};
};

struct TraceResult {
  Graph graph;
  std::vector<Tensor> outputs;  // what the eager run returned
};

TraceResult trace(const StepFn& fn, const std::vector<Tensor>& inputs, const TraceOptions& options = {});

}  // namespace trireme::graph
