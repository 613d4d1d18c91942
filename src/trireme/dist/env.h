// Rank discovery: who this process is in the job, read from the environment that a launcher
// set (trireme launch / torchrun, mpirun, or Slurm's srun).
//
//   DistEnv env = dist_env_from_environment();
//   // env.rank, env.world_size, env.local_rank, env.master_addr, env.master_port, env.token
//   auto store = std::make_shared<StoreClient>(store_client_options(env));
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trireme/dist/store.h"

namespace trireme::dist {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;    // 0: unknown (a single process needs no store)
  std::string token;      // TRIREME_STORE_TOKEN
  int restart_count = 0;  // which attempt of the group this is (launch --max-restarts, Slurm requeue)
  std::string source;     // "torchrun", "openmpi", "mpich", "slurm" or "default": where the ranks came from
  // Nobody else hosts the store (srun starts the ranks directly): rank 0 does, listening on
  // store_listen_host (Note [the store under srun] in env.cpp).
  bool host_store = false;
  std::string store_listen_host;
};

// Looks a variable up; nullopt when unset. The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads, in order of preference:
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE          (trireme launch, torchrun)
//   OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE       (Open MPI's mpirun)
//   PMI_RANK/PMI_SIZE, MPI_LOCALRANKID/MPI_LOCALNRANKS       (MPICH / Intel MPI)
//   SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE + SLURM_NODEID
//                                                            (a task of an srun job step)
// and MASTER_ADDR / MASTER_PORT / TRIREME_STORE_TOKEN / TRIREME_RESTART_COUNT whichever found
// the ranks. Under srun, which sets none of those four, the rendezvous is derived from Slurm's
// variables (Note [the store under srun] in env.cpp). A Slurm batch script outside srun is one
// process. Without any of them: one process, rank 0. Throws on inconsistent values (rank
// outside the world, a non-number, no rendezvous host), naming the variable to change.
DistEnv dist_env_from_environment(const EnvLookup& lookup = {});

// The first host of a Slurm host list: "node[03-05,9],gpu1" -> "node03". Throws on an empty
// or malformed list.
std::string slurm_first_host(const std::string& nodelist);

// What to do to start `processes` ranks, for messages: "srun --ntasks N" under Slurm,
// "--nproc N" elsewhere.
std::string how_to_start(const DistEnv& env, int64_t processes);

// The store that rank 0 hosts when env.host_store (nullptr otherwise). Keep it alive until the
// job's collectives are done. Throws naming MASTER_PORT when the port is taken.
std::unique_ptr<StoreServer> host_store_if_needed(const DistEnv& env);

// Options for a client of the job's store (MASTER_ADDR:MASTER_PORT, with this rank's token).
StoreClientOptions store_client_options(const DistEnv& env,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace trireme::dist
