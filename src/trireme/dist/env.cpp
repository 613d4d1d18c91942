// Rank discovery from torchrun-style, Open MPI, MPICH and Slurm environment variables.
#include "trireme/dist/env.h"

#include <cstdlib>

#include "trireme/core/error.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

namespace {

int parse_int(const std::string& name, const std::string& value) {
  try {
    size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  TRIREME_FAIL("dist env: ", name, "='", value, "' is not an integer");
}

// Slurm writes tasks per node as "4" or "4(x2),3": the first node's count is what a
// homogeneous job needs.
int parse_slurm_tasks_per_node(const std::string& value) {
  size_t end = value.find_first_not_of("0123456789");
  return parse_int("SLURM_NTASKS_PER_NODE", value.substr(0, end));
}

}  // namespace

DistEnv dist_env_from_environment(const EnvLookup& lookup_arg) {
  EnvLookup lookup = lookup_arg ? lookup_arg : [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto get_int = [&](const std::string& name, int fallback) {
    auto v = lookup(name);
    return v && !v->empty() ? parse_int(name, *v) : fallback;
  };

  // Which launcher started us, by the variables it sets: rank, size, local rank, local size.
  struct Launcher {
    const char *source, *rank, *size, *local_rank, *local_size;
  };
  static const Launcher launchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  DistEnv env;
  env.source = "default";
  for (const Launcher& l : launchers) {
    // torchrun's RANK alone is not enough (users export it for other reasons): it needs WORLD_SIZE.
    if (!lookup(l.rank) || (std::string(l.source) == "torchrun" && !lookup(l.size))) continue;
    env.source = l.source;
    env.rank = get_int(l.rank, 0);
    env.world_size = get_int(l.size, 1);
    env.local_rank = get_int(l.local_rank, env.rank);
    if (l.local_size) {
      env.local_world_size = get_int(l.local_size, env.world_size);
    } else {  // Slurm: SLURM_NTASKS_PER_NODE
      auto per_node = lookup("SLURM_NTASKS_PER_NODE");
      env.local_world_size = per_node ? parse_slurm_tasks_per_node(*per_node) : env.world_size;
    }
    break;
  }
  if (auto v = lookup("MASTER_ADDR")) env.master_addr = *v;
  env.master_port = get_int("MASTER_PORT", 0);
  if (auto v = lookup(kStoreTokenEnv)) env.token = *v;
  env.restart_count = get_int("TRIREME_RESTART_COUNT", get_int("TORCHELASTIC_RESTART_COUNT", 0));

  TRIREME_CHECK(env.world_size >= 1, "dist env (", env.source, "): world size ", env.world_size, " must be >= 1");
  TRIREME_CHECK(env.rank >= 0 && env.rank < env.world_size, "dist env (", env.source, "): rank ", env.rank,
                " is outside a world of ", env.world_size);
  TRIREME_CHECK(env.local_world_size >= 1 && env.local_rank >= 0 && env.local_rank < env.local_world_size,
                "dist env (", env.source, "): local rank ", env.local_rank, " is outside a local world of ",
                env.local_world_size);
  TRIREME_CHECK(env.master_port >= 0 && env.master_port < 65536, "dist env: MASTER_PORT=", env.master_port,
                " is not a port");
  return env;
}

StoreClientOptions store_client_options(const DistEnv& env, std::chrono::milliseconds timeout) {
  TRIREME_CHECK(env.master_port > 0, "dist env: MASTER_PORT is not set, so there is no store to connect to");
  return {.host = env.master_addr, .port = env.master_port, .token = env.token, .rank = env.rank, .timeout = timeout};
}

}  // namespace trireme::dist
