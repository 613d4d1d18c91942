// The search: every layout of a config over a number of devices that the config's rules allow
// (dp x tp x pp = devices, tp dividing the heads, dp x micro-batches dividing the global batch,
// the schedules and virtual stages, sequence parallelism, ZeRO stages, recomputation), priced by
// the cost model, kept when the memory estimate fits a device, ranked by predicted step time;
// the plans returned have passed the config's own validation.
//
//   SearchResult r = search_plans(config, inputs, 8, 5);
//   if (!r.impossible.empty()) ...;            // why nothing fits, and what would
//   r.plans[0].layout.overrides();             // the best plan, as --set arguments
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/plan/cost_model.h"

namespace trireme::plan {

struct Plan {
  Layout layout;
  PlanCost cost;
};

struct SearchResult {
  std::vector<Plan> plans;         // the fastest feasible plans, fastest first (at most `top`)
  std::vector<Plan> faster_unfit;  // up to 3 layouts faster than plans[0] whose memory does not fit
  // For each split dp x tp x pp: its fastest plan that fits (validated), or, when none fits, the
  // one that needs the least memory; for explanations.
  std::vector<Plan> best_per_split;
  int64_t examined = 0, unfit = 0, invalid = 0;
  int64_t faster_unfit_count = 0;  // layouts faster than plans[0] that do not fit
  double seconds = 0;
  std::string impossible;  // "" when a plan was found; else why none, and what would work
  // The layout the config itself gives, when it is one of `devices` devices: its prediction and
  // its place among the plans that fit (1 = the best; 0 = it does not fit).
  std::optional<Plan> given;
  int64_t given_rank = 0;
};

// The layouts the config's divisibility rules allow on `devices` devices (before memory).
std::vector<Layout> enumerate_layouts(const io::TrainConfig& tc, int64_t devices);

// The best_per_split entry for dp x tp x pp; nullptr when no layout has that split.
const Plan* best_for_split(const SearchResult& r, int64_t dp, int64_t tp, int64_t pp);

// `config` supplies the model, batch, optimizer and precision (its layout keys are replaced);
// in.cluster the devices. Uses `devices` of them (0: all of the cluster).
SearchResult search_plans(const io::Config& config, const PlanInputs& in, int64_t devices, int top);

}  // namespace trireme::plan
