// The issue's use case in miniature: LoRA SFT straight from a Hugging Face Qwen2 folder (the
// committed fixture: llama architecture, grouped-query attention, q/k/v biases, byte-level BPE
// with <|endoftext|> and <|im_end|>), with a ChatML template, in one process and over tp = 2 with the same losses;
// the run's examples end with the tokenizer's end-of-text token; the result exports to a Hugging
// Face folder with the adapters merged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dist/parallel_cli.h"
#include "tiny_trainer_config.h"
#include "trireme/io/sft.h"
#include "trireme/io/tokenizer.h"
#include "trireme/io/file_write.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

const std::string kQwen2 = std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/qwen2";

const std::string kSftConfig = std::string(trireme::testing::kQwen2FixtureModel) + R"(
[finetune]
task = "sft"
template = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{response}"
[lora]
rank = 4
alpha = 8
targets = ["attn.q_proj", "attn.kv_proj", "mlp.c_proj"]
[optim]
lr = 1e-2
[schedule]
kind = "constant"
warmup_steps = 0
[train]
steps = 8
batch_size = 4
eval_interval = 4
eval_batches = 2
checkpoint_interval = 8
threads = 1
)";

}  // namespace

TEST(HfSft, LoraSftFromAQwen2FolderInOneProcessAndTensorParallel) {
  const fs::path root = fs::temp_directory_path() / ("trireme_hf_sft_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::ofstream(root / "sft.toml") << kSftConfig;
  {
    std::ofstream data(root / "sft.jsonl");
    const char* words[] = {"hello", "world", "the moon", "frost", "home", "light", "night", "bright"};
    for (int i = 0; i < 40; ++i)
      data << nlohmann::json{{"prompt", std::string(words[i % 8]) + "?"}, {"response", words[(i * 3 + 1) % 8]}}.dump()
           << "\n";
  }
  // Every example ends with the tokenizer's end-of-text token.
  const auto tok = io::tokenizer_from_json(nlohmann::json::parse(io::read_file(kQwen2 + "/tokenizer.json")));
  const auto end = io::sft_end_tokens(*tok);
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(tok->token_to_string(end[0]), "<|endoftext|>");

  auto run = [&](const std::string& name, const std::string& extra) {
    return run_cli("train -c " + (root / "sft.toml").string() + " --set train.out_dir=" + (root / name).string() +
                   " --set finetune.train_file=" + (root / "sft.jsonl").string() + " --init-from " + kQwen2 + " " + extra);
  };
  Result one = run("one", "");
  ASSERT_EQ(one.status, 0) << one.output;
  Result tp = run("tp2", "--nproc 2 --set parallel.tp=2");
  ASSERT_EQ(tp.status, 0) << tp.output;
  const auto a = read_metrics(root / "one"), b = read_metrics(root / "tp2");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i].loss, a[i].loss, 1e-4 * a[i].loss) << "step " << i + 1;
  EXPECT_LT(a.back().loss, a.front().loss);
  Result exported = run_cli("export hf " + (root / "tp2").string() + " -o " + (root / "hf").string() + " --merge");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_TRUE(fs::exists(root / "hf" / "tokenizer.json"));
  fs::remove_all(root);
}
