// LoRA under sequence parallelism and ZeRO-3 against one process, end to end (`trireme train
// --nproc 2`, lora_layouts.h): from the same base checkpoint, the single process's per-step losses,
// gradient norms and final adapters, with the base weights unchanged, under
//   tp = 2 with sequence parallelism (gpt2, llama, and SFT): the column adapters' u = A x
//     gathered by rows, A's gradient summed over tp; the row adapters inside the reduce-scatter;
//   dp = 2 with ZeRO-3 (gpt2, llama): the adapters reduce-scattered and stepped by their shards,
//     the frozen base weights sharded beside them and gathered for each block, and whole in the
//     checkpoint; a run stopped at step 6 and resumed logs the uninterrupted run's metrics and
//     ends with its adapters, bit for bit.
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

TEST_F(LoraSpZero3Layouts, ZeroThreeResumesAsUninterrupted) {
  trireme::parallel::testing::Result r = lora("gpt2_zero3_whole", "gpt2", kZeroThree);
  ASSERT_EQ(r.status, 0) << r.output;
  r = lora("gpt2_zero3_parts", "gpt2", std::string(kZeroThree) + " --set train.steps=6");
  ASSERT_EQ(r.status, 0) << r.output;
  r = lora("gpt2_zero3_parts", "gpt2", kZeroThree, /*resume=*/true);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto a = trireme::parallel::testing::read_metrics(root_ / "gpt2_zero3_whole");
  const auto b = trireme::parallel::testing::read_metrics(root_ / "gpt2_zero3_parts");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].loss, a[i].loss) << "step " << i + 1;
    EXPECT_EQ(b[i].grad_norm, a[i].grad_norm) << "step " << i + 1;
  }
  const auto whole = trireme::train::load_adapters(latest("gpt2_zero3_whole") / "adapters.safetensors");
  const auto parts = trireme::train::load_adapters(latest("gpt2_zero3_parts") / "adapters.safetensors");
  ASSERT_EQ(parts.tensors.size(), whole.tensors.size());
  for (const auto& [name, t] : whole.tensors) {
    ASSERT_TRUE(parts.tensors.count(name)) << name;
    EXPECT_EQ(parts.tensors.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  }
}
