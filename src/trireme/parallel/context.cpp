// ParallelContext (see context.h).
#include "trireme/parallel/context.h"

#include "trireme/core/error.h"

namespace trireme::parallel {

ParallelContext ParallelContext::single(ParallelLayout layout) {
  TRIREME_CHECK(layout.world_size() == 1, "ParallelContext::single: layout dp=", layout.dp, " tp=", layout.tp,
                " pp=", layout.pp, " needs ", layout.world_size(), " processes");
  ParallelContext ctx;
  ctx.layout_ = layout;
  return ctx;
}

ParallelContext::ParallelContext(std::shared_ptr<dist::ProcessGroup> world, ParallelLayout layout) : layout_(layout) {
  TRIREME_CHECK(world != nullptr, "ParallelContext: no world process group");
  TRIREME_CHECK(layout.dp >= 1 && layout.tp >= 1 && layout.pp >= 1, "ParallelContext: dp, tp and pp must be >= 1");
  TRIREME_CHECK(world->size() == layout.world_size(), "parallel layout dp=", layout.dp, " x pp=", layout.pp,
                " x tp=", layout.tp, " needs ", layout.world_size(), " processes, but the job has ", world->size(),
                " (set --nproc ", layout.world_size(), " or change [parallel])");
  mesh_ = std::make_shared<dist::DeviceMesh>(world, std::vector<dist::MeshDim>{{"dp", layout.dp}, {"pp", layout.pp},
                                                                               {"tp", layout.tp}});
}

int ParallelContext::world_rank() const { return mesh_ ? mesh_->world()->rank() : 0; }

int ParallelContext::coordinate(const char* dim) const { return mesh_ ? mesh_->coordinate(dim) : 0; }

dist::ProcessGroup* ParallelContext::group(const char* dim) const { return mesh_ ? mesh_->group(dim).get() : nullptr; }

std::string ParallelContext::describe() const {
  return str_cat("dp=", layout_.dp, " tp=", layout_.tp, " pp=", layout_.pp, " (rank ", world_rank(), ": dp ",
                 dp_rank(), ", pp ", pp_rank(), ", tp ", tp_rank(), ")");
}

}  // namespace trireme::parallel
