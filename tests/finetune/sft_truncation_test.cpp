// An SFT file whose prompts are all longer than a sequence leaves no response token to train on:
// refused naming the file key and the way out, instead of a run whose loss is 0 at every step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trireme/io/config.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/train/finetune_data.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

io::TrainConfig sft_config(const std::string& train_file, int64_t block_size) {
  io::Config c = io::Config::parse("", "t",
                                   {"finetune.task=sft", "finetune.train_file=" + train_file, "finetune.val_fraction=0.25",
                                    "model.block_size=" + std::to_string(block_size)});
  return c.resolve();
}

std::string write_examples(const std::string& prompt) {
  const fs::path p = fs::temp_directory_path() / ("sft_truncation_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream f(p);
  for (int i = 0; i < 8; ++i) f << R"({"prompt": ")" << prompt << R"(", "response": "xy"})" << "\n";
  return p.string();
}

}  // namespace

TEST(SftTruncation, PromptsLongerThanASequenceAreRefusedNotTrainedOnWithLossZero) {
  const io::CharTokenizer tok = io::CharTokenizer::train("abxy{}");
  const std::string file = write_examples(std::string(40, 'a'));
  // Sequences of 65 tokens hold the 40-token prompt and the response: accepted.
  EXPECT_GT(train::prepare_sft_data(sft_config(file, 64), tok).train.response_tokens, 0);
  // Sequences of 17 tokens: every prompt is cut before its response.
  try {
    train::prepare_sft_data(sft_config(file, 16), tok);
    FAIL() << "expected a refusal";
  } catch (const io::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("finetune.train_file: no response token is left to train on"), std::string::npos) << m;
    EXPECT_NE(m.find("6 of 6 example(s)"), std::string::npos) << m;
    EXPECT_NE(m.find("raise model.block_size"), std::string::npos) << m;
  }
  fs::remove(file);
}
