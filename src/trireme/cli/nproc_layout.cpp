// --nproc N of `train` and `estimate`: the [parallel] overrides that make the layout N processes.
#include "trireme/cli/commands.h"
#include "trireme/io/config.h"

namespace trireme::cli {

std::vector<std::string> nproc_overrides(const io::ParallelConfig& par, int nproc) {
  if (par.world_size() == 1 && nproc > 1) return {str_cat("parallel.dp=", nproc)};
  if (nproc != par.world_size()) {
    throw io::ConfigError(str_cat("parallel: --nproc ", nproc, " but the layout ", par.describe(),
                                  " needs dp x tp x pp = ", par.world_size(), " processes; use --nproc ",
                                  par.world_size(), ", or set [parallel] so that dp x tp x pp = ", nproc,
                                  " (e.g. --set parallel.dp=", nproc, ")"));
  }
  return {};
}

}  // namespace trireme::cli
