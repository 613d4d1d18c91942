// ParallelContext: the layout of a run (dp x pp x tp) and this rank's process groups, passed
// explicitly to everything that needs them (no global parallel state; see DESIGN.md).
//
//   auto world = std::make_shared<dist::ProcessGroupGloo>(store, rank, size);
//   ParallelContext ctx(world, {.dp = 2, .tp = 2});
//   ctx.tp_group()->all_reduce(partial)->wait();     // the ranks of my tensor-parallel group
//   ParallelContext solo = ParallelContext::single(); // one process: every size is 1
#pragma once

#include <memory>
#include <string>

#include "trireme/dist/device_mesh.h"
#include "trireme/dist/process_group.h"

namespace trireme::parallel {

struct ParallelLayout {
  int dp = 1, tp = 1, pp = 1;
  int micro_batches = 1;           // per optimizer step, per pipeline (and for gradient accumulation)
  std::string schedule = "1f1b";   // pipeline schedule: "gpipe" | "1f1b" | "interleaved"
  int virtual_stages = 1;          // model chunks per pipeline rank (interleaved 1F1B)
  int zero = 0;                    // ZeRO stage over dp (0: none; parallel/zero.h, fully_sharded.h)
  int64_t bucket_bytes = 25 << 20; // data-parallel gradient bucket size
  bool sequence_parallel = false;  // shard activations outside tp regions by rows (Note [sequence parallelism])
  int world_size() const { return dp * tp * pp; }
};

class ParallelContext {
 public:
  // One process, no communication: every group accessor returns null and every size is 1.
  static ParallelContext single(ParallelLayout layout = {});
  // Every rank of `world` calls this. The mesh is (dp, pp, tp) with tp varying fastest, so a
  // tensor-parallel group is neighbouring ranks (one node), then pipeline stages, then replicas.
  ParallelContext(std::shared_ptr<dist::ProcessGroup> world, ParallelLayout layout);

  const ParallelLayout& layout() const { return layout_; }
  int world_rank() const;
  int world_size() const { return layout_.world_size(); }
  int dp_rank() const { return coordinate("dp"); }
  int tp_rank() const { return coordinate("tp"); }
  int pp_rank() const { return coordinate("pp"); }
  // The groups along each dimension (size-1 groups included when there is a world); null in single().
  dist::ProcessGroup* dp_group() const { return group("dp"); }
  dist::ProcessGroup* tp_group() const { return group("tp"); }
  dist::ProcessGroup* pp_group() const { return group("pp"); }
  dist::ProcessGroup* world() const { return mesh_ ? mesh_->world().get() : nullptr; }
  const dist::DeviceMesh* mesh() const { return mesh_.get(); }
  // "dp=2 tp=2 pp=1 (rank 3: dp 1, pp 0, tp 1)", for logs.
  std::string describe() const;

 private:
  ParallelContext() = default;
  int coordinate(const char* dim) const;
  dist::ProcessGroup* group(const char* dim) const;

  ParallelLayout layout_;
  std::shared_ptr<dist::DeviceMesh> mesh_;
};

}  // namespace trireme::parallel
