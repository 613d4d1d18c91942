// LoRA in parallel layouts against one process, end to end (`trireme train --nproc 2`): from the
// same base checkpoint, a LoRA run with adapter dropout logs the single process's per-step losses
// and gradient norms (1e-4 relative) under dp = 2 (only the adapters reduced), tp = 2 (column-
// parallel layers: A replicated, B split by rows; row-parallel layers: A split by columns, B
// replicated, added before the reduce) for gpt2 and llama, ZeRO-2 (only the adapters sharded)
// and pp = 2 (the frozen tied embedding); the base weights of every run's checkpoint are the base
// model's and the final adapters the single process's (sequence parallelism and ZeRO-3:
// lora_sp_zero3_layouts_test.cpp).
#include "lora_layouts.h"

namespace {
class LoraLayouts : public trireme::finetune::testing::LoraLayoutsTest {};
}  // namespace

TEST_F(LoraLayouts, DataParallelMatchesOneProcess) { expect_same_run("gpt2", "gpt2_dp2", "--nproc 2"); }

TEST_F(LoraLayouts, TensorParallelMatchesOneProcess) {
  expect_same_run("gpt2", "gpt2_tp2", "--nproc 2 --set parallel.tp=2");
}

TEST_F(LoraLayouts, TensorParallelLlamaMatchesOneProcess) {
  expect_same_run("llama", "llama_tp2", "--nproc 2 --set parallel.tp=2");
}

TEST_F(LoraLayouts, ZeroTwoMatchesOneProcess) {
  expect_same_run("gpt2", "gpt2_dp2_zero2", "--nproc 2 --set parallel.zero=2");
}

TEST_F(LoraLayouts, PipelineMatchesOneProcess) { expect_same_run("gpt2", "gpt2_pp2", "--nproc 2 --set parallel.pp=2"); }

TEST_F(LoraLayouts, RecomputationMatchesOneProcess) {
  expect_same_run("gpt2", "gpt2_recompute", "--set memory.recompute=full");
  expect_same_run("gpt2", "gpt2_selective", "--set memory.recompute=selective");
}
