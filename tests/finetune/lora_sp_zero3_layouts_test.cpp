// LoRA under sequence parallelism and ZeRO-3 against one process, end to end (`trireme train
// --nproc 2`, lora_layouts.h): from the same base checkpoint, the single process's per-step losses,
// gradient norms and final adapters, with the base weights unchanged, under
//   tp = 2 with sequence parallelism (gpt2, llama, and SFT): the column adapters' u = A x
//     gathered by rows, A's gradient summed over tp; the row adapters inside the reduce-scatter;
//   dp = 2 with ZeRO-3 (gpt2, llama): the adapters reduce-scattered and stepped by their shards,
//     the frozen base weights sharded beside them and gathered for each block, and whole in the
//     checkpoint.
#include "lora_layouts.h"

namespace {
class LoraSpZero3Layouts : public trireme::finetune::testing::LoraLayoutsTest {};
const char* kSequenceParallel = "--nproc 2 --set parallel.tp=2 --set parallel.sequence_parallel=true";
const char* kZeroThree = "--nproc 2 --set parallel.zero=3";
}  // namespace

TEST_F(LoraSpZero3Layouts, SequenceParallelMatchesOneProcess) { expect_same_run("gpt2", "gpt2_sp", kSequenceParallel); }

TEST_F(LoraSpZero3Layouts, SequenceParallelLlamaMatchesOneProcess) {
  expect_same_run("llama", "llama_sp", kSequenceParallel);
}

TEST_F(LoraSpZero3Layouts, SequenceParallelSftMatchesOneProcess) {
  expect_same_run("gpt2", "gpt2_sp_sft", kSequenceParallel, "sft");
}

TEST_F(LoraSpZero3Layouts, ZeroThreeMatchesOneProcess) { expect_same_run("gpt2", "gpt2_zero3", kZeroThree); }

TEST_F(LoraSpZero3Layouts, ZeroThreeLlamaMatchesOneProcess) { expect_same_run("llama", "llama_zero3", kZeroThree); }
