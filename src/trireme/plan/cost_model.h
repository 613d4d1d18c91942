// The predicted step time and memory of one layout on one cluster (docs/PLANNER.md, "The cost
// model"):
//   step = pipeline (micro-batches x the slowest stage's compute and tensor-parallel all-reduces,
//          plus the bubble: (pp - 1) / virtual_stages micro-batch times)
//        + pipeline sends and receives on the critical path
//        + the data-parallel gradient reduction not hidden behind the last backward
//          (and ZeRO's all-gather of the updated parameters)
//        + the optimizer step (memory-bound over this rank's share of the parameters)
// Memory is train::estimate_training_memory_per_rank's (the trainer's own estimate).
//
//   PlanInputs in{tc, vocab, cluster, costs};
//   PlanCost c = predict(in, layout);   // c.step_s, c.peak_bytes, c.parts
#pragma once

#include <string>

#include "trireme/io/config.h"
#include "trireme/plan/cluster.h"
#include "trireme/plan/layout.h"
#include "trireme/plan/model_costs.h"

namespace trireme::plan {

struct PlanInputs {
  io::TrainConfig train;  // the model, batch, optimizer and precision (its layout is replaced)
  int64_t vocab = 0;      // <= 0: as the memory estimator assumes
  ClusterSpec cluster;
  ModelCosts costs;
  double memory_reserve = 0.08;  // share of each device's memory kept free (allocator, runtime)
  double vocab_size() const;
};

struct StepParts {
  double compute = 0;    // the slowest stage's forward, backward (and recomputation) of all micro-batches
  double tp_comm = 0;    // tensor-parallel all-reduces (sp: reduce-scatters and all-gathers) not hidden
  double bubble = 0;     // pipeline fill and drain
  double pp_comm = 0;    // pipeline sends and receives
  double dp_comm = 0;    // data-parallel reduction (and ZeRO's gathers) not hidden
  double optimizer = 0;  // the optimizer step (calibrated: and the rest of a step besides the model)
};

struct PlanCost {
  StepParts parts;
  double step_s = 0;
  double tokens_per_s = 0;
  double peak_bytes = 0;      // the estimator's worst rank
  double rank0_bytes = 0;     // the estimator's rank 0 (what a run's metrics report)
  double capacity_bytes = 0;  // what a device offers after the reserve
  bool fits = false;
  // The host's part of parts.compute: queuing the kernels of the slowest stage's micro-batches
  // (calibrated on GPUs; 0 where not measured). host_bound: it is nearly all of that compute, so
  // the CPU's pace, not the device's, sets the step's (and varies with the CPU's clock).
  double host_s = 0;
  bool host_bound = false;
  // What dominates the step: "compute", "bubble", "tp all-reduces over NVLink", "the host's
  // kernel launches", ...
  std::string binding;
};

PlanCost predict(const PlanInputs& in, const Layout& l);

// Seconds for the collectives, over `size` ranks of a link (ring algorithms).
double all_reduce_seconds(double bytes, int64_t size, const LinkSpec& link, double efficiency);
double reduce_scatter_seconds(double bytes, int64_t size, const LinkSpec& link, double efficiency);  // = all-gather
double send_seconds(double bytes, const LinkSpec& link, double efficiency);

// "NVLink-class link inside a node", for explanations.
std::string link_name(const ClusterSpec& c, const LinkSpec& link);

}  // namespace trireme::plan
