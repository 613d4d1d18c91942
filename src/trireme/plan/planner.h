// The planner's front door: from a validated config and a cluster, the inputs the cost model
// needs (the model's counted costs included), the search, and the explanation of its choice.
//
//   PlanInputs in = plan_inputs(config, cluster, vocab);
//   SearchResult r = search_plans(config, in, devices, 5);
//   std::string why = explain_plans(in, r, devices);
//   Layout best = auto_layout(config, devices);   // what parallel.auto runs
#pragma once

#include <string>

#include "trireme/io/config.h"
#include "trireme/plan/search.h"

namespace trireme::plan {

// The model's costs are counted once per model shape and process (a fraction of a second).
PlanInputs plan_inputs(const io::Config& config, const ClusterSpec& cluster, int64_t vocab);

// What binds the best plan, how the runners-up and the well-known layouts (all data parallel,
// the largest tensor-parallel group inside a node, all pipeline) compare, and the faster layouts
// that do not fit. Several lines, each ending in '\n'.
std::string explain_plans(const PlanInputs& in, const SearchResult& r, int64_t devices);

// The cluster a training run of `tc` on `devices` processes, `devices_per_node` of them per node,
// has: this machine's CPU processes for train.device = "cpu", else this machine's GPUs
// (this_machine_gpus); calibrated where a profile of this machine and device kind exists
// (plan/calibrate.h).
ClusterSpec cluster_for_training(const io::TrainConfig& tc, int64_t devices, int64_t devices_per_node);
// Nodes of the preset GPU matching the CUDA device's name (H200, H100, A100 80GB/40GB/PCIe;
// others: H100 figures with the device's bf16 peak), `devices_per_node` per node.
ClusterSpec this_machine_gpus(int64_t devices, int64_t devices_per_node);

struct AutoPlan {
  Plan plan;
  std::vector<std::string> overrides;  // the layout as --set arguments, parallel.auto=false last
  std::string log_line;                // what the trainer logs: the plan and its prediction
};
// parallel.auto: the best plan for `devices` processes of this kind; io::ConfigError when none.
AutoPlan auto_plan(const io::Config& config, int64_t devices, int64_t vocab);

}  // namespace trireme::plan
