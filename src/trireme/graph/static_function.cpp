// The cache of graphs by input signature.
#include "trireme/graph/static_function.h"

#include "trireme/graph/fusion.h"
#include "trireme/graph/gemm_folds.h"
#include "trireme/graph/multi_tensor.h"
#include "trireme/graph/norm_folds.h"

namespace trireme::graph {

Graph optimize(const Graph& g, const StaticOptions& o) {
  Graph out = o.dead_code ? eliminate_dead_code(g) : g;
  if (o.common_subexpressions) out = eliminate_common_subexpressions(out);
  if (o.dead_code && o.common_subexpressions) out = eliminate_dead_code(out);  // what CSE left unused
  if (o.fold_into_norms) out = fold_norm_gradient_casts(fold_norm_gradient_adds(fold_norm_residual_adds(fold_norm_casts(out))));
  if (o.fold_into_gemms) out = fold_gelu_into_gemms(out);
  if (o.multi_tensor_clip) out = merge_scales(merge_sum_squares(out));  // before fusion takes their adds
  if (o.fuse_elementwise) out = fuse_elementwise(out);
  if (o.schedule_for_memory) out = schedule_for_memory(out);
  if (o.multi_tensor_adamw) out = merge_adamw(out);  // after scheduling: it merges the updates where they landed
  return out;
}

StaticFunction::StaticFunction(StepFn fn, StaticOptions options) : fn_(std::move(fn)), options_(std::move(options)) {}

std::vector<Tensor> StaticFunction::operator()(const std::vector<Tensor>& inputs) {
  for (auto& exe : graphs_) {
    if (exe->matches(inputs)) {
      last_ = exe.get();
      ++replays_;
      return exe->run(inputs);
    }
  }
  if (int(graphs_.size()) >= options_.max_graphs) {
    std::string seen;
    for (auto& exe : graphs_) {
      seen += "\n  ";
      for (const InputSpec& s : exe->input_specs()) seen += describe(s) + "; ";
    }
    std::string now;
    for (const Tensor& t : inputs) now += (t.defined() ? describe(input_spec(t)) : std::string("undefined")) + "; ";
    TRIREME_FAIL("graph: the inputs changed signature ", graphs_.size() + 1, " times (limit ", options_.max_graphs,
                 "): now ", now, "traced before:", seen, "\nkeep the shapes fixed (pad the last batch) or run eagerly");
  }
  TraceResult r = trace(fn_, inputs, options_.trace);
  ++traces_;
  graphs_.push_back(std::make_unique<Executable>(optimize(r.graph, options_), ReplayOptions{.cuda_graph = options_.cuda_graph}));
  last_ = graphs_.back().get();
  return r.outputs;
}

}  // namespace trireme::graph
