// `trireme plan --measure K`: the top K plans run for a few steps each on this machine, through
// `trireme train --nproc N` as a user would run them, and their measured step time and peak
// memory set beside the predictions, with the errors.
#pragma once

#include <string>
#include <vector>

#include "trireme/plan/search.h"

namespace trireme::cli {

// What a run's metrics.jsonl says of it: the median step time after the first two steps (0 when
// there were too few), the fastest and slowest of those steps (how far to trust the median), and
// rank 0's peak memory.
struct MeasuredRun {
  double step_s = 0, fastest_step_s = 0, slowest_step_s = 0, peak_bytes = 0;
};
MeasuredRun measured_run(const std::string& metrics_path);

// "parallel.auto: predicted 12.3 ms per step and 1.2 GiB peak on rank 0; measured 14.0 ms and
// 1.2 GiB (-12%, +1%)": a plan's prediction beside its run.
std::string prediction_against_run(const plan::Plan& p, const MeasuredRun& m);

// Runs r's top k plans, then a sample of the rest of up to k more: first the best plan of each
// other split (dp x tp x pp), then from `all` (every plan that fits, fastest first) the best of
// each micro-batch count and recomputation mode not yet run, so that on one device too the sample
// spans what the planner prices. Prints the table; returns the exit status (1 when a run failed).
int measure_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                  const plan::SearchResult& r, const std::vector<plan::Plan>& all, int k);

}  // namespace trireme::cli
