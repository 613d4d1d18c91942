// Rank discovery from torchrun-style, Open MPI, MPICH and Slurm environment variables.
#include "trireme/dist/env.h"

#include <cstdlib>

#include "trireme/core/error.h"
#include "trireme/dist/store.h"

namespace trireme::dist {

// Note [the store under srun]
// srun starts every task itself: no launcher hosts the store or sets MASTER_ADDR/MASTER_PORT.
// So rank 0 hosts it, and every task derives the same rendezvous from the variables srun gives
// them all:
//   host   MASTER_ADDR if set; else, for a step on one node, 127.0.0.1 (the store listens on
//          loopback only); else the first host of SLURM_STEP_NODELIST (srun puts task 0 on the
//          step's first node) and the store listens on every interface.
//   port   MASTER_PORT if set; else derived from SLURM_JOB_ID and SLURM_STEP_ID, so that two
//          steps or jobs sharing a node rarely collide (a collision is an error naming MASTER_PORT).
//   token  TRIREME_STORE_TOKEN if set (scripts/slurm/train.sbatch exports a random one; srun
//          passes the batch script's environment on); else derived from the job and step ids,
//          which keeps steps apart but is no secret.
// Only tasks of a job step count as ranks (SLURM_STEP_ID is set): a batch script itself also
// sees SLURM_PROCID=0 and SLURM_NTASKS, but it is one process.

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

// Slurm writes tasks per node as "4(x2),3": node i's count is entry i of the expanded list.
int slurm_tasks_on_node(const std::string& name, const std::string& value, int node) {
  int index = 0;
  size_t pos = 0;
  while (pos < value.size()) {
    size_t end = value.find(',', pos);
    std::string item = value.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      TRIREME_CHECK(item.back() == ')', "dist env: ", name, "='", value, "' is not a Slurm task count list");
      repeat = parse_int(name, item.substr(paren + 2, item.size() - paren - 3));
      item = item.substr(0, paren);
    }
    count = parse_int(name, item);
    if (node < index + repeat) return count;
    index += repeat;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  TRIREME_FAIL("dist env: ", name, "='", value, "' lists ", index, " node(s), but SLURM_NODEID is ", node);
}

}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  TRIREME_CHECK(!nodelist.empty(), "dist env: the Slurm node list is empty");
  size_t comma = nodelist.find(','), bracket = nodelist.find('[');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);  // "node1,node2" or "node1"
  }
  size_t close = nodelist.find(']', bracket);
  TRIREME_CHECK(close != std::string::npos && bracket > 0 && close > bracket + 1, "dist env: '", nodelist,
                "' is not a Slurm node list");
  const std::string inside = nodelist.substr(bracket + 1, close - bracket - 1);
  const std::string first = inside.substr(0, inside.find_first_of(",-"));
  TRIREME_CHECK(!first.empty() && first.find_first_not_of("0123456789") == std::string::npos, "dist env: '", nodelist,
                "' is not a Slurm node list");
  size_t suffix_end = nodelist.find_first_of(",[", close + 1);
  return nodelist.substr(0, bracket) + first +
         nodelist.substr(close + 1, suffix_end == std::string::npos ? std::string::npos : suffix_end - close - 1);
}

DistEnv dist_env_from_environment(const EnvLookup& lookup_arg) {
  EnvLookup lookup = lookup_arg ? lookup_arg : [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto get = [&](const std::string& name) -> std::optional<std::string> {
    auto v = lookup(name);
    return v && !v->empty() ? v : std::nullopt;
  };
  auto get_int = [&](const std::string& name, int fallback) {
    auto v = get(name);
    return v ? parse_int(name, *v) : fallback;
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
      {"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", nullptr},
  };
  DistEnv env;
  env.source = "default";
  for (const Launcher& l : launchers) {
    const std::string source = l.source;
    if (!get(l.rank)) continue;
    // torchrun's RANK alone is not enough (users export it for other reasons): it needs WORLD_SIZE.
    if (source == "torchrun" && !get(l.size)) continue;
    // A Slurm batch script sees SLURM_PROCID too; only the tasks of an srun step are ranks.
    if (source == "slurm" && !get("SLURM_STEP_ID") && !get("SLURM_STEPID")) continue;
    env.source = source;
    env.rank = get_int(l.rank, 0);
    if (source == "slurm") {
      env.world_size = get_int("SLURM_STEP_NUM_TASKS", get_int("SLURM_NTASKS", 1));
      const char* per_node_name =
          get("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
      auto per_node = get(per_node_name);
      env.local_world_size =
          per_node ? slurm_tasks_on_node(per_node_name, *per_node, get_int("SLURM_NODEID", 0)) : env.world_size;
    } else {
      env.world_size = get_int(l.size, 1);
      env.local_world_size = get_int(l.local_size, env.world_size);
    }
    env.local_rank = get_int(l.local_rank, env.rank);
    break;
  }
  if (auto v = get("MASTER_ADDR")) env.master_addr = *v;
  env.master_port = get_int("MASTER_PORT", 0);
  if (auto v = get(kStoreTokenEnv)) env.token = *v;
  env.restart_count = get_int("TRIREME_RESTART_COUNT", get_int("TORCHELASTIC_RESTART_COUNT", 0));

  if (env.source == "slurm") {
    // A requeued job (sbatch --requeue, or a node failure) is a restart: it resumes.
    env.restart_count = get_int("TRIREME_RESTART_COUNT", get_int("SLURM_RESTART_COUNT", 0));
    if (env.world_size > 1) {  // Note [the store under srun]
      const int job = get_int("SLURM_JOB_ID", get_int("SLURM_JOBID", 0));
      const int step = get_int("SLURM_STEP_ID", get_int("SLURM_STEPID", 0));
      const int nodes = get_int("SLURM_STEP_NUM_NODES", get_int("SLURM_JOB_NUM_NODES", get_int("SLURM_NNODES", 0)));
      env.host_store = env.rank == 0;
      env.store_listen_host = "0.0.0.0";
      if (!get("MASTER_ADDR")) {
        if (nodes == 1) {
          env.master_addr = env.store_listen_host = "127.0.0.1";
        } else {
          auto list = get("SLURM_STEP_NODELIST");
          if (!list) list = get("SLURM_JOB_NODELIST");
          TRIREME_CHECK(list.has_value(), "dist env (slurm): no rendezvous host: the step runs on ",
                        nodes > 0 ? std::to_string(nodes) : std::string("an unknown number of"),
                        " nodes but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set; start the "
                        "ranks with srun inside an allocation, or set MASTER_ADDR to the host of rank 0");
          env.master_addr = slurm_first_host(*list);
        }
      } else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost") {
        env.store_listen_host = "127.0.0.1";
      }
      if (env.master_port == 0) env.master_port = 10000 + int((uint64_t(job) * 16 + uint64_t(step)) % 20000);
      if (env.token.empty()) env.token = "slurm-job-" + std::to_string(job) + "-step-" + std::to_string(step);
    }
  }

  TRIREME_CHECK(env.world_size >= 1, "dist env (", env.source, "): world size ", env.world_size, " must be >= 1");
  TRIREME_CHECK(env.rank >= 0 && env.rank < env.world_size, "dist env (", env.source, "): rank ", env.rank,
                " is outside a world of ", env.world_size);
  TRIREME_CHECK(env.local_world_size >= 1 && env.local_rank >= 0 && env.local_rank < env.local_world_size, "dist env (",
                env.source, "): local rank ", env.local_rank, " is outside a local world of ", env.local_world_size);
  TRIREME_CHECK(env.master_port >= 0 && env.master_port < 65536, "dist env: MASTER_PORT=", env.master_port,
                " is not a port");
  return env;
}

std::string how_to_start(const DistEnv& env, int64_t processes) {
  if (env.source == "slurm") {
    return str_cat("run ", processes, " Slurm task", processes == 1 ? "" : "s", " (sbatch/srun --ntasks ", processes,
                   ", e.g. --nodes N --ntasks-per-node ", processes, "/N; see scripts/slurm/train.sbatch)");
  }
  return str_cat("start ", processes, " process", processes == 1 ? "" : "es", " (--nproc ", processes, ")");
}

std::unique_ptr<StoreServer> host_store_if_needed(const DistEnv& env) {
  if (!env.host_store) return nullptr;
  try {
    return std::make_unique<StoreServer>(
        StoreServerOptions{.host = env.store_listen_host, .port = env.master_port, .token = env.token});
  } catch (const Error& e) {
    TRIREME_FAIL("dist env (", env.source, "): rank 0 cannot host the job's store on ", env.store_listen_host, ":",
                 env.master_port, ": ", e.what(),
                 "; set MASTER_PORT to a free port for the job (exported before srun)");
  }
}

StoreClientOptions store_client_options(const DistEnv& env, std::chrono::milliseconds timeout) {
  TRIREME_CHECK(env.master_port > 0, "dist env: MASTER_PORT is not set, so there is no store to connect to");
  return {.host = env.master_addr, .port = env.master_port, .token = env.token, .rank = env.rank, .timeout = timeout};
}

}  // namespace trireme::dist
