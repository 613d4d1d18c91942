// trireme plan and parallel.auto as a user meets them: the table, JSON, refusals with exit 2,
// calibration, and a 2-process CPU run of the planner's choice.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "trireme/cuda/device.h"

namespace {

namespace fs = std::filesystem;
using trireme::cli_testing::run;

const std::string kTiny =
    " --set model.d_model=64 --set model.n_layer=2 --set model.block_size=32 --set train.batch_size=4";

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trireme_plan_cli_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(PlanCli, PresetTableAndExplanation) {
  const auto r =
      run("plan --preset h100-nvlink --nodes 2 --top 3 --explain --set model.n_head=8 --set "
          "train.batch_size=64 --set train.precision=bf16");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 nodes x 8 H100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run the best: --set parallel.dp="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("The best plan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("#3 "), std::string::npos) << r.out;
}

TEST(PlanCli, JsonListsPlansWithTheirParts) {
  const auto r = run("plan --preset a100-40gb-nvlink --devices 4 --top 2 --json --set train.batch_size=8");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["plans"].size(), 2u);
  EXPECT_EQ(j["cluster"]["devices"], 4);
  EXPECT_GT(j["plans"][0]["step_s"].get<double>(), 0);
  EXPECT_TRUE(j["plans"][0]["parts_s"].contains("dp_comm"));
  EXPECT_LE(j["plans"][0]["step_s"].get<double>(), j["plans"][1]["step_s"].get<double>());
}

TEST(PlanCli, BadRequestsExitTwoNamingTheProblem) {
  auto r = run("plan --preset nope");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("unknown preset 'nope'"), std::string::npos) << r.out;
  const fs::path dir = temp_dir("bad");
  std::ofstream(dir / "c.toml") << "nodes = 1\ndevices_per_node = 2\n[device]\nmemory_gib = -1\n";
  r = run("plan --cluster " + (dir / "c.toml").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("device.memory_gib: expected a number > 0"), std::string::npos) << r.out;
  r = run("plan --preset h100-nvlink --devices 64");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--devices: 64 devices, but the cluster has 8"), std::string::npos) << r.out;
  r = run("plan --preset h100-nvlink --set train.batch_size=5 --set model.n_layer=2 --set model.n_head=2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("no layout splits the run over 8 devices"), std::string::npos) << r.out;
  r = run("plan --preset h100-nvlink --set model.d_model=3");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("model.n_head"), std::string::npos) << r.out;
}

TEST(PlanCli, CalibrateWritesAProfileThatPlansThenUse) {
  const fs::path dir = temp_dir("calibrate");
  const std::string profile = (dir / "profile.json").string();
  auto r = run("plan --calibrate --profile " + profile + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(fs::exists(profile));
  EXPECT_NE(r.out.find("all_reduce"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("send_recv"), std::string::npos) << r.out;
  r = run("plan --devices 2 --profile " + profile + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("calibrated on this machine"), std::string::npos) << r.out;
  // A profile of another machine is refused.
  std::ifstream in(profile);
  auto j = nlohmann::json::parse(in);
  j["fingerprint"] = "cpu=elsewhere";
  std::ofstream(profile) << j.dump();
  r = run("plan --devices 2 --profile " + profile + kTiny);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("another machine"), std::string::npos) << r.out;
}

// train.device = "cuda" plans for this machine's GPUs (the preset matching their name, H100
// figures for a name it does not know), and calibrates them; without a GPU the calibration is a
// clear refusal.
TEST(PlanCli, AGpuRunIsPlannedForGpusAndCalibratedOnThem) {
  auto r = run("plan --devices 2 --set train.device=cuda" + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("x 2 H"), std::string::npos) << r.out;  // H100 or H200
  if (trireme::cuda::is_available()) GTEST_SKIP() << "a GPU is usable here: the refusal cannot be seen";
  const fs::path dir = temp_dir("calibrate_gpu");
  r = run("plan --calibrate --set train.device=cuda --profile " + (dir / "p.json").string() + kTiny);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("train.device = \"cuda\", but"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "p.json"));
}

TEST(PlanCli, AutoLayoutRunsWhatPlanRanksFirst) {
  const fs::path dir = temp_dir("same_choice");
  const std::string env = "TRIREME_CACHE_DIR=" + dir.string() + " ";
  const std::string tiny = kTiny + " --set model.n_layer=4 --set train.batch_size=8";
  auto r = trireme::cli_testing::run_command(env + TRIREME_BINARY + " plan --devices 2 --json --top 1" + tiny);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  std::string set_args;
  for (const auto& o : j["plans"][0]["overrides"]) set_args += " --set " + o.get<std::string>();
  r = trireme::cli_testing::run_command(env + TRIREME_BINARY +
                                        " train --nproc 2 --print-config --set parallel.auto=true" + tiny);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto chosen = trireme::cli_testing::run_command(env + TRIREME_BINARY + " train --print-config" + tiny +
                                                        set_args + " --set parallel.auto=false");
  ASSERT_EQ(chosen.status, 0) << chosen.out;
  // The printed configs agree on every layout key (the auto run's log line comes first).
  EXPECT_NE(r.out.find(chosen.out), std::string::npos) << r.out << "\n---\n" << chosen.out;
}

TEST(PlanCli, AutoLayoutWithNoLayoutExitsTwoSayingWhatWorks) {
  const fs::path dir = temp_dir("auto_impossible");
  const auto r = run("train --nproc 3 --set parallel.auto=true --set model.n_layer=2 --set train.out_dir=" +
                     (dir / "run").string() + kTiny);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("parallel.auto: no layout splits the run over 3 devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Device counts that work: 1, 2, 4"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "run" / "metrics.jsonl"));
}

TEST(PlanCli, AutoLayoutTrainsTwoProcessesAndMeasureReportsErrors) {
  const fs::path dir = temp_dir("auto");
  auto r =
      run("train --nproc 2 --set parallel.auto=true --set train.steps=2 --set train.eval_interval=0 --set "
          "schedule.warmup_steps=0 --set train.out_dir=" +
          (dir / "run").string() + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("parallel.auto: dp="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary: 2 steps"), std::string::npos) << r.out;
  // The prediction beside the run (two steps are too few to time after the warm-up).
  EXPECT_NE(r.out.find("peak on rank 0; too few steps to measure"), std::string::npos) << r.out;
  r = trireme::cli_testing::run_command("TRIREME_CACHE_DIR=" + dir.string() + " " + TRIREME_BINARY +
                                        " plan --devices 2 --measure 1" + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("steps' range"), std::string::npos) << r.out;  // the fastest and slowest counted step
  EXPECT_NE(r.out.find("step time: mean |predicted - measured| / measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak memory: mean |predicted - measured| / measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the chosen plan (#1) measured"), std::string::npos) << r.out;
  // On one device every plan is the same split: the sample beside the top plan is the best plan
  // of another micro-batch count or recomputation mode.
  r = trireme::cli_testing::run_command("TRIREME_CACHE_DIR=" + dir.string() + " " + TRIREME_BINARY +
                                        " plan --devices 1 --measure 1" + kTiny);
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t sample = r.out.find("a sample of the others");
  ASSERT_NE(sample, std::string::npos) << r.out;
  const size_t first = r.out.find("\n1   dp=1 tp=1 pp=1 "), second = r.out.find("\n2   dp=1 tp=1 pp=1 ", sample);
  ASSERT_NE(first, std::string::npos) << r.out;
  ASSERT_NE(second, std::string::npos) << r.out;
  auto mb_and_recompute = [&](size_t at) {
    const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    const size_t mb = line.find(" mb="), rc = line.find(" recompute=");
    return line.substr(mb, line.find(' ', mb + 1) - mb) + line.substr(rc, line.find_first_of(" :", rc + 1) - rc);
  };
  EXPECT_NE(mb_and_recompute(first), mb_and_recompute(second)) << r.out;
}

}  // namespace
