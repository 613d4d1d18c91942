// Parallel training on GPUs through the CLI: `trireme train --nproc 2` with train.device = "cuda"
// logs the one-GPU run's per-step losses and validation loss (within 1e-4 relative, f32) for the
// shared tiny trainer config:
// - pipeline parallelism, parallel.pp = 2 (one stage per GPU, activations and gradients sent over
//   NCCL), with GPipe and with 1F1B (4 micro-batches), and with dropout 0.1 (Note [dropout keyed
//   by global sample]);
// - tensor parallelism, parallel.tp = 2, replicated and with sequence parallelism: on 2 GPUs of
//   one host the latter runs every copy-engine path of Note [peer all-reduce] (staged reduce-
//   scatters with the bias in their sum, staged all-gathers read in place, dW summed by source).
// Skips without 2 usable GPUs or without NCCL in the build.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "tiny_trainer_config.h"
#include "trireme/dist/process_group_nccl.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

struct CliRun {
  int status = -1;
  std::string output;
  std::vector<double> losses;
  double val_loss = NAN;
};

// Trains the tiny config (20 steps, on the GPU) through the CLI with `extra` flags.
CliRun train_cli(const fs::path& root, const std::string& name, double dropout, const std::string& extra) {
  const fs::path dir = root / name;
  const fs::path cfg = root / (name + ".toml");
  std::ofstream(cfg) << trireme::testing::tiny_trainer_config(dir.string(), 20, dropout,
                                                               {"optim.lr=3e-3", "optim.grad_clip=1.0",
                                                                "schedule.min_lr=3e-4", "train.device=cuda"})
                            .to_toml();
  CliRun r;
  // Bounded, so that a hang is a failure with the ranks' output rather than a stuck test.
  const std::string cmd = "timeout 60 " + std::string(TRIREME_BINARY) + " train -c " + cfg.string() + " " + extra + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream f(dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    r.losses.push_back(j["loss"].get<double>());
    if (j.contains("val_loss") && j["val_loss"].is_number()) r.val_loss = j["val_loss"].get<double>();
  }
  return r;
}

// Every step's loss and the validation loss of `run` within 1e-4 relative of `one`'s.
void expect_matches_one_gpu(const CliRun& run, const CliRun& one, const std::string& name) {
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_EQ(run.losses.size(), one.losses.size()) << run.output;
  EXPECT_NE(run.output.find("cuda"), std::string::npos) << run.output;
  double worst = 0;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    const double e = std::abs(run.losses[i] - one.losses[i]) / one.losses[i];
    worst = std::max(worst, e);
    EXPECT_LT(e, 1e-4) << name << " step " << i + 1 << ": " << run.losses[i] << " vs " << one.losses[i];
  }
  const double val = std::abs(run.val_loss - one.val_loss) / one.val_loss;
  EXPECT_LT(val, 1e-4) << name << ": validation " << run.val_loss << " vs " << one.val_loss;
  std::printf("[ training ] %s on 2 GPUs vs 1 GPU, %zu steps: loss %.5f -> %.5f, worst relative diff %.2e, "
              "validation %.2e\n",
              name.c_str(), one.losses.size(), run.losses.front(), run.losses.back(), worst, val);
}

bool two_gpus_with_nccl(std::string* why) {
  if (!dist::nccl_is_built()) *why = "trireme was built without NCCL";
  else if (cuda::device_count() < 2) *why = str_cat("needs 2 GPUs; found ", cuda::device_count());
  return why->empty();
}

struct Layout {
  std::string name;   // of its run directory
  std::string flags;  // for `trireme train`
  std::string says;   // a phrase its log must contain ("" for none)
};

// With dropout 0 and 0.1: one GPU, then each layout on 2 GPUs, each matching the one-GPU run.
void expect_layouts_match_one_gpu(const std::string& dir_name, const std::vector<Layout>& layouts) {
  const fs::path root = trireme::testing::fresh_run_dir(dir_name);
  fs::create_directories(root);
  for (double dropout : {0.0, 0.1}) {
    const std::string tag = dropout > 0 ? "_dropout" : "";
    CliRun one = train_cli(root, "one_gpu" + tag, dropout, "");
    ASSERT_EQ(one.status, 0) << one.output;
    ASSERT_EQ(one.losses.size(), 20u) << one.output;
    for (const Layout& l : layouts) {
      CliRun run = train_cli(root, l.name + tag, dropout, l.flags);
      expect_matches_one_gpu(run, one, l.name + tag);
      if (!l.says.empty()) {
        EXPECT_NE(run.output.find(l.says), std::string::npos) << run.output;
      }
    }
  }
  fs::remove_all(root);
}

}  // namespace

// The first training step hung here (2026-11-30) until the executor started each transfer alone
// (Note [pipeline transfers start alone] in parallel/pipeline_executor.h): GPipe runs first.
TEST(CudaPipeline, TwoStagesOnTwoGpusMatchOneGpu) {
  TRIREME_REQUIRE_GPU();
  if (std::string why; !two_gpus_with_nccl(&why)) GTEST_SKIP() << "pipeline parallelism on GPUs: " << why;
  const std::string pp = "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 --set parallel.schedule=";
  expect_layouts_match_one_gpu("trireme_cuda_pipeline", {{"pp2_gpipe", pp + "gpipe", ""}, {"pp2_1f1b", pp + "1f1b", ""}});
}

TEST(CudaTensorParallel, TwoGpusMatchOneGpuWithAndWithoutSequenceParallelism) {
  TRIREME_REQUIRE_GPU();
  if (std::string why; !two_gpus_with_nccl(&why)) GTEST_SKIP() << "tensor parallelism on GPUs: " << why;
  const std::string tp = "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=";
  expect_layouts_match_one_gpu("trireme_cuda_tensor_parallel",
                               {{"tp2", tp + "false", ""}, {"tp2_sp", tp + "true", "sequence parallel"}});
}
