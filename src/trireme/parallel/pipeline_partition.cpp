// Pipeline partition: balanced or given contiguous layer ranges (see pipeline_partition.h).
#include "trireme/parallel/pipeline_partition.h"

#include "trireme/core/error.h"

namespace trireme::parallel {

std::vector<int> pipeline_partition_sizes(int layers, int stages) {
  TRIREME_CHECK(stages >= 1, "pipeline partition: stages must be >= 1, got ", stages);
  TRIREME_CHECK(layers >= stages, "pipeline partition: ", layers, " layers cannot fill ", stages,
                " stages (each stage needs at least one layer)");
  std::vector<int> sizes(static_cast<size_t>(stages), layers / stages);
  for (int s = 0; s < layers % stages; ++s) ++sizes[size_t(s)];  // extras to the earliest stages
  return sizes;
}

std::vector<StageLayers> pipeline_partition(int layers, int stages, const std::vector<int>& sizes) {
  std::vector<int> n = sizes.empty() ? pipeline_partition_sizes(layers, stages) : sizes;
  TRIREME_CHECK(int(n.size()) == stages, "pipeline partition: ", n.size(), " stage sizes given for ", stages,
                " stages");
  std::vector<StageLayers> out;
  int begin = 0;
  for (int s = 0; s < stages; ++s) {
    TRIREME_CHECK(n[size_t(s)] >= 1, "pipeline partition: stage ", s, " is given ", n[size_t(s)],
                  " layers (each stage needs at least one)");
    out.push_back({begin, begin + n[size_t(s)]});
    begin += n[size_t(s)];
  }
  TRIREME_CHECK(begin == layers, "pipeline partition: the stage sizes sum to ", begin, " but the model has ", layers,
                " layers");
  return out;
}

}  // namespace trireme::parallel
