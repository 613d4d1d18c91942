// Ranks and the rendezvous from an srun step's variables (Note [the store under srun] in
// dist/env.cpp), and the messages for a Slurm job that cannot work: no rendezvous host, a task
// count that does not match the [parallel] layout.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "slurm_helpers.h"
#include "trireme/dist/env.h"

using namespace trireme;
using namespace trireme::dist;
using trireme::slurm_testing::Result;
using trireme::slurm_testing::run_shell;
namespace fs = std::filesystem;

namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup from(Vars vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

// What srun gives task `rank` of a 4-task step on two nodes, 2 tasks each (Slurm 22.05).
Vars srun_task(int rank) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "1"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_LOCALID", std::to_string(rank % 2)},
          {"SLURM_NODEID", std::to_string(rank / 2)},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
}

}  // namespace

TEST(SlurmEnv, FirstHostOfANodeList) {
  EXPECT_EQ(slurm_first_host("node1"), "node1");
  EXPECT_EQ(slurm_first_host("node1,node2"), "node1");
  EXPECT_EQ(slurm_first_host("gpu[07-08]"), "gpu07");
  EXPECT_EQ(slurm_first_host("gpu[3,5-9],cpu1"), "gpu3");
  EXPECT_EQ(slurm_first_host("rack[2-3]-n1,x"), "rack2-n1");
  EXPECT_EQ(slurm_first_host("a,b[1-2]"), "a");
  EXPECT_THROW(slurm_first_host(""), Error);
  EXPECT_THROW(slurm_first_host("gpu[07-08"), Error);
  EXPECT_THROW(slurm_first_host("gpu[]"), Error);
}

TEST(SlurmEnv, EveryTaskAgreesOnTheRendezvousAndOnlyRankZeroHostsIt) {
  for (int rank = 0; rank < 4; ++rank) {
    DistEnv e = dist_env_from_environment(from(srun_task(rank)));
    EXPECT_EQ(e.source, "slurm");
    EXPECT_EQ(e.rank, rank);
    EXPECT_EQ(e.world_size, 4);
    EXPECT_EQ(e.local_rank, rank % 2);
    EXPECT_EQ(e.local_world_size, 2);
    EXPECT_EQ(e.master_addr, "gpu07");
    EXPECT_EQ(e.store_listen_host, "0.0.0.0");  // the other node connects
    EXPECT_EQ(e.master_port, dist_env_from_environment(from(srun_task(0))).master_port);
    EXPECT_GT(e.master_port, 0);
    EXPECT_EQ(e.token, dist_env_from_environment(from(srun_task(0))).token);
    EXPECT_FALSE(e.token.empty());
    EXPECT_EQ(e.host_store, rank == 0);
  }
  // Another step of the job gets another port; what the user exports wins.
  Vars next = srun_task(1);
  next["SLURM_STEP_ID"] = "2";
  EXPECT_NE(dist_env_from_environment(from(next)).master_port,
            dist_env_from_environment(from(srun_task(1))).master_port);
  next.insert({{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29511"}, {"TRIREME_STORE_TOKEN", "secret"}});
  DistEnv set = dist_env_from_environment(from(next));
  EXPECT_EQ(set.master_addr, "10.1.1.1");
  EXPECT_EQ(set.master_port, 29511);
  EXPECT_EQ(set.token, "secret");
  // Uneven nodes: "3,1" puts 1 task on the second node.
  Vars uneven = srun_task(3);
  uneven["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  uneven["SLURM_LOCALID"] = "0";
  EXPECT_EQ(dist_env_from_environment(from(uneven)).local_world_size, 1);
}

TEST(SlurmEnv, OneNodeStepsStayOnLoopback) {
  Vars one = srun_task(1);
  one["SLURM_STEP_NUM_NODES"] = "1";
  one["SLURM_NODEID"] = "0";
  one["SLURM_STEP_TASKS_PER_NODE"] = "4";
  one["SLURM_STEP_NODELIST"] = one["SLURM_JOB_NODELIST"] = "gpu07";
  DistEnv e = dist_env_from_environment(from(one));
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.store_listen_host, "127.0.0.1");
  EXPECT_EQ(e.local_world_size, 4);
}

TEST(SlurmEnv, TheBatchScriptAndRequeuedJobs) {
  // The batch script sees SLURM_PROCID=0 and SLURM_NTASKS=4 but is not a task of a step: one process.
  DistEnv batch = dist_env_from_environment(
      from({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}}));
  EXPECT_EQ(batch.source, "default");
  EXPECT_EQ(batch.world_size, 1);
  EXPECT_FALSE(batch.host_store);
  // A requeued job is a restart, so `trireme train` resumes (cmd_train.cpp).
  Vars requeued = srun_task(2);
  requeued["SLURM_RESTART_COUNT"] = "1";
  EXPECT_EQ(dist_env_from_environment(from(requeued)).restart_count, 1);
  // trireme launch inside an allocation: its variables win, and it hosts the store.
  Vars launched = srun_task(0);
  launched.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
  DistEnv l = dist_env_from_environment(from(launched));
  EXPECT_EQ(l.source, "torchrun");
  EXPECT_FALSE(l.host_store);
}

TEST(SlurmEnv, NoRendezvousHostNamesWhatToSet) {
  Vars lost = srun_task(1);
  lost.erase("SLURM_STEP_NODELIST");
  lost.erase("SLURM_JOB_NODELIST");
  try {
    dist_env_from_environment(from(lost));
    FAIL() << "no rendezvous host accepted";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no rendezvous host"), std::string::npos) << m;
    EXPECT_NE(m.find("SLURM_STEP_NODELIST"), std::string::npos) << m;
    EXPECT_NE(m.find("set MASTER_ADDR"), std::string::npos) << m;
  }
  Vars bad = srun_task(1);
  bad["SLURM_STEP_TASKS_PER_NODE"] = "2(x";
  EXPECT_THROW(dist_env_from_environment(from(bad)), Error);
}

// The same refusals from `trireme train` itself, as a task of a (pretend) srun step sees them:
// one line naming what to change, and no hang waiting for a store.
TEST(SlurmEnv, TrainRefusesAMismatchedAllocationOrAMissingHost) {
  const fs::path dir = fs::temp_directory_path() / ("trireme_slurm_env_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tiny.toml") << trireme::parallel::testing::kConfig;
  const std::string train = "train -c " + (dir / "tiny.toml").string() +
                            " --set train.out_dir=" + (dir / "out").string() +
                            " --set parallel.dp=2 --set parallel.tp=2";
  const std::string step =
      "env SLURM_JOB_ID=9 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=1 ";

  Result three = run_shell(step + "SLURM_STEP_NUM_TASKS=3 SLURM_STEP_TASKS_PER_NODE=3 " + std::string(TRIREME_BINARY) +
                           " " + train);
  EXPECT_EQ(three.status, 2) << three.output;
  EXPECT_NE(three.output.find("needs dp x tp x pp = 4 processes, but WORLD_SIZE is 3 (from slurm)"), std::string::npos)
      << three.output;
  EXPECT_NE(three.output.find("--ntasks 4"), std::string::npos) << three.output;

  Result lost = run_shell(
      "env SLURM_JOB_ID=9 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 "
      "SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE='2(x2)' " +
      std::string(TRIREME_BINARY) + " " + train);
  EXPECT_EQ(lost.status, 1) << lost.output;
  EXPECT_NE(lost.output.find("no rendezvous host"), std::string::npos) << lost.output;
  fs::remove_all(dir);
}
