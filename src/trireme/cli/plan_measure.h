// `trireme plan --measure K`: the top K plans run for a few steps each on this machine, through
// `trireme train --nproc N` as a user would run them, and their measured step time and peak
// memory set beside the predictions, with the errors.
#pragma once

#include <string>
#include <vector>

#include "trireme/plan/search.h"

namespace trireme::cli {

// Prints the table; returns the exit status (1 when a plan's run failed).
int measure_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                  const plan::SearchResult& r, int k);

}  // namespace trireme::cli
