// The memory estimate against what training really holds: for each configuration, a three-step
// `trireme train` on the CPU records rank 0's peak of live tensor bytes (metrics.jsonl,
// peak_memory_bytes) and `trireme estimate --json` predicts rank 0's peak; they agree within 5 %
// over layouts, precision, micro-batches, optimizers, recomputation, ZeRO stages 1-3, pipeline
// schedules and both architectures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "parallel_cli.h"

namespace fs = std::filesystem;
using namespace trireme::parallel::testing;

namespace {

struct Case {
  const char* name;
  const char* sets;
};

class MemoryEstimate : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_estimate_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static fs::path root_;
};
fs::path MemoryEstimate::root_;

constexpr const char* kCommon =
    " --set model.d_model=128 --set model.n_layer=4 --set model.n_head=4 --set model.block_size=128"
    " --set train.batch_size=8 --set train.steps=3 --set schedule.warmup_steps=1 --set train.eval_interval=100"
    " --set train.checkpoint_interval=100 --set train.threads=1"
    // The runs measure; whatever else the machine is doing, they should not be refused.
    " --set train.memory_check=false ";

TEST_P(MemoryEstimate, IsWithinFivePercentOfTheMeasuredPeak) {
  const Case c = GetParam();
  const fs::path dir = root_ / c.name;
  Result t = run_cli(std::string("train") + kCommon + c.sets + " --set train.out_dir=" + dir.string());
  ASSERT_EQ(t.status, 0) << t.output;
  double measured = 0;
  std::ifstream f(dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    measured = std::max(measured, nlohmann::json::parse(line)["peak_memory_bytes"].get<double>());
  }
  // The corpus's character vocabulary, as the run found it.
  const auto vocab = nlohmann::json::parse(std::ifstream(dir / "data" / "tokenizer.json"))["vocab"].size();
  Result e = run_cli(std::string("estimate --json --vocab ") + std::to_string(vocab) + kCommon + c.sets);
  ASSERT_EQ(e.status, 0) << e.output;
  const double estimated = nlohmann::json::parse(e.output)["ranks"][0]["peak_bytes"].get<double>();
  ASSERT_GT(measured, 0);
  std::printf("[ %s ] measured %.1f MiB, estimated %.1f MiB, ratio %.3f\n", c.name, measured / (1 << 20),
              estimated / (1 << 20), estimated / measured);
  EXPECT_NEAR(estimated / measured, 1.0, 0.05) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, MemoryEstimate,
    ::testing::Values(Case{"d128", ""}, Case{"d256", "--set model.d_model=256"},
                      Case{"d256_L8_T256", "--set model.d_model=256 --set model.n_layer=8 --set model.block_size=256"},
                      Case{"d256_L8_T256_recompute", "--set model.d_model=256 --set model.n_layer=8 "
                                                     "--set model.block_size=256 --set memory.recompute=full"},
                      Case{"d256_L8_T256_selective", "--set model.d_model=256 --set model.n_layer=8 "
                                                     "--set model.block_size=256 --set memory.recompute=selective"},
                      Case{"d256_bf16_selective", "--set model.d_model=256 --set train.precision=bf16 --set memory.recompute=selective"},
                      Case{"d256_B16_mb4", "--set model.d_model=256 --set train.batch_size=16 --set parallel.micro_batches=4"},
                      Case{"d256_bf16", "--set model.d_model=256 --set train.precision=bf16"},
                      Case{"d256_bf16_B16_mb4", "--set model.d_model=256 --set train.precision=bf16 "
                                                "--set train.batch_size=16 --set parallel.micro_batches=4"},
                      Case{"d384_L6_sgd", "--set model.d_model=384 --set model.n_layer=6 --set optim.name=sgd"},
                      Case{"dp2", "--set model.d_model=256 --nproc 2"},
                      Case{"dp2_zero", "--set model.d_model=256 --nproc 2 --set parallel.dp=2 --set parallel.zero=true"},
                      Case{"tp2", "--set model.d_model=256 --nproc 2 --set parallel.tp=2"},
                      Case{"tp2_sp", "--set model.d_model=256 --nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true"},
                      Case{"pp2_1f1b", "--set model.d_model=256 --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4"},
                      Case{"pp2_gpipe", "--set model.d_model=256 --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 "
                                        "--set parallel.schedule=gpipe"},
                      Case{"pp2_gpipe_bf16", "--set model.d_model=256 --nproc 2 --set parallel.pp=2 --set parallel.micro_batches=4 "
                                             "--set parallel.schedule=gpipe --set train.precision=bf16"},
                      Case{"llama_gqa", "--set model.d_model=256 --set model.arch=llama --set model.n_kv_head=2"},
                      Case{"llama_bf16_ffn512", "--set model.d_model=256 --set model.arch=llama --set train.precision=bf16 "
                                            "--set model.intermediate_size=512"},
                      Case{"llama_tp2", "--set model.d_model=256 --set model.arch=llama --set model.n_kv_head=2 --nproc 2 "
                                    "--set parallel.tp=2"},
                      Case{"dp2_zero2", "--set model.d_model=256 --nproc 2 --set parallel.zero=2"},
                      Case{"dp2_zero2_L8_T256", "--set model.d_model=256 --set model.n_layer=8 --set model.block_size=256 "
                                                "--nproc 2 --set parallel.zero=2 --set parallel.bucket_mb=1"},
                      Case{"dp2_zero3_L8_T256", "--set model.d_model=256 --set model.n_layer=8 --set model.block_size=256 "
                                                "--nproc 2 --set parallel.zero=3 --set parallel.bucket_mb=1"},
                      Case{"dp4_zero3_L8", "--set model.d_model=256 --set model.n_layer=8 --set model.block_size=64 "
                                           "--nproc 4 --set parallel.zero=3 --set parallel.bucket_mb=1"},
                      Case{"dp2_zero3_d384_mb2", "--set model.d_model=384 --set model.n_layer=6 --nproc 2 --set parallel.zero=3 "
                                                 "--set parallel.bucket_mb=2 --set parallel.micro_batches=2"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
