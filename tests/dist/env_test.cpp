// Rank discovery from torchrun, Open MPI, Slurm and empty environments.
#include <gtest/gtest.h>

#include <map>

#include "trireme/dist/env.h"

using namespace trireme;
using namespace trireme::dist;

namespace {

EnvLookup from(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

}  // namespace

TEST(DistEnv, Torchrun) {
  DistEnv e = dist_env_from_environment(from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                               {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                                               {"MASTER_PORT", "29500"}, {"TRIREME_STORE_TOKEN", "abc"},
                                               {"TRIREME_RESTART_COUNT", "2"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.token, "abc");
  EXPECT_EQ(e.restart_count, 2);
  StoreClientOptions o = store_client_options(e);
  EXPECT_EQ(o.host, "10.0.0.1");
  EXPECT_EQ(o.port, 29500);
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.token, "abc");
}

TEST(DistEnv, OpenMpiAndSlurm) {
  DistEnv m = dist_env_from_environment(from({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                                               {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}));
  EXPECT_EQ(m.source, "openmpi");
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.world_size, 6);
  EXPECT_EQ(m.local_rank, 2);
  EXPECT_EQ(m.local_world_size, 3);
  DistEnv s = dist_env_from_environment(from({{"SLURM_PROCID", "7"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"},
                                               {"SLURM_LOCALID", "3"}, {"SLURM_NODEID", "1"},
                                               {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                                               {"SLURM_STEP_NODELIST", "node[1-2]"}}));
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 7);
  EXPECT_EQ(s.local_rank, 3);
  EXPECT_EQ(s.local_world_size, 4);
  // torchrun's variables win over the scheduler's (trireme launch inside an allocation).
  DistEnv both = dist_env_from_environment(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"},
                                                  {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(both.source, "torchrun");
  EXPECT_EQ(both.rank, 1);
}

TEST(DistEnv, DefaultsAndErrors) {
  DistEnv d = dist_env_from_environment(from({}));
  EXPECT_EQ(d.source, "default");
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_THROW(store_client_options(d), Error);  // no MASTER_PORT: no store
  EXPECT_THROW(dist_env_from_environment(from({{"RANK", "4"}, {"WORLD_SIZE", "4"}})), Error);
  EXPECT_THROW(dist_env_from_environment(from({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), Error);
  try {
    dist_env_from_environment(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT"), std::string::npos) << e.what();
  }
}
