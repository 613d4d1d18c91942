// Which decoder layers each pipeline stage holds: contiguous runs, balanced or given.
//
//   pipeline_partition_sizes(5, 3)            // {2, 2, 1}
//   pipeline_partition(5, 3)[1]               // StageLayers{.begin = 2, .end = 4}
//   pipeline_partition(8, 2, {3, 5})          // given: layers 0-2 and 3-7
//
// Note [pipeline partition rule]
// Balanced sizes differ by at most one and the extra layers go to the earliest stages. Besides
// its layers, stage 0 holds the embeddings (a lookup: cheap) and the last stage holds ln_f, the
// language-model head and the loss (a (d, V) GEMM per token, often the cost of one or more
// layers), so the last stage is the one that should be lighter, never heavier. Models whose
// head costs several layers should pass sizes explicitly (e.g. from the planner's cost model).
//
// With v virtual stages per rank (interleaved schedules) the layers are split into p * v
// pieces and virtual stage s = chunk * p + rank holds piece s.
#pragma once

#include <vector>

namespace trireme::parallel {

struct StageLayers {
  int begin = 0, end = 0;  // decoder layers [begin, end)
  int size() const { return end - begin; }
  bool operator==(const StageLayers&) const = default;
};

// Balanced sizes (Note [pipeline partition rule]); needs layers >= stages (no empty stage).
std::vector<int> pipeline_partition_sizes(int layers, int stages);
// The layer ranges of `stages` consecutive stages: balanced when `sizes` is empty, otherwise
// `sizes` (one per stage, each >= 1, summing to `layers`). Errors name the bad size.
std::vector<StageLayers> pipeline_partition(int layers, int stages, const std::vector<int>& sizes = {});

}  // namespace trireme::parallel
