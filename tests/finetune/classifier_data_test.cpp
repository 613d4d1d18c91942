// A classifier's data: each text becomes one packed sequence of block_size + 1 tokens whose only
// counted target is its class index at its last token (a cut text's at the block's end); more
// labels than tokens are refused naming the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tiny_trainer_config.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/train/classifier.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

std::string write(const std::string& name, const std::string& text) { return trireme::testing::write_temp_file(name, text); }

io::TrainConfig config(const std::string& train, const std::string& val, std::vector<std::string> extra = {}) {
  std::vector<std::string> keys = {"finetune.task=classify", "finetune.train_file=" + train,
                                   "finetune.val_file=" + val, "model.block_size=4"};
  keys.insert(keys.end(), extra.begin(), extra.end());
  return io::Config::parse("", "defaults", keys).resolve();
}

}  // namespace

TEST(ClassifierData, OneSequencePerTextWithTheClassAtItsLastToken) {
  const io::CharTokenizer tok = io::CharTokenizer::train("abcdef");  // a = 1 ... f = 6
  const std::string train = write("cd.train.jsonl",
                                  "{\"text\": \"ab\", \"label\": \"y\"}\n{\"text\": \"abcdef\", \"label\": \"x\"}\n"
                                  "{\"text\": \"e\", \"label\": \"y\"}\n");
  const std::string val = write("cd.val.jsonl", "{\"text\": \"c\", \"label\": \"x\"}\n");
  const train::ClassifierData d = train::prepare_classifier_data(config(train, val), tok, {});
  EXPECT_EQ(d.labels, (std::vector<std::string>{"x", "y"}));
  // "ab": its ids, then class 1 (y) after b; "abcdef" cut to "abcd", class 0 after d; "e", class 1.
  EXPECT_EQ(d.train_tokens, (std::vector<int32_t>{1, 2, 1, 0, 0, 1, 2, 3, 4, 0, 5, 1, 0, 0, 0}));
  EXPECT_EQ(d.train_mask, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(d.val_tokens, (std::vector<int32_t>{3, 0, 0, 0, 0}));
  EXPECT_EQ(d.val_mask, (std::vector<uint8_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(d.val_labels, (std::vector<int>{0}));
  EXPECT_DOUBLE_EQ(d.majority_accuracy, 0.0);  // y is the training majority, the one val text is x
  fs::remove(train);
  fs::remove(val);
}

TEST(ClassifierData, MoreLabelsThanTokensAreRefused) {
  const io::CharTokenizer tok = io::CharTokenizer::train("ab");  // 3 tokens
  std::string lines;
  for (const char* l : {"p", "q", "r", "s"}) lines += std::string("{\"text\": \"a\", \"label\": \"") + l + "\"}\n";
  const std::string train = write("cd4.train.jsonl", lines);
  try {
    train::prepare_classifier_data(config(train, train), tok, {});
    FAIL() << "expected a refusal";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("finetune.labels: 4 labels, more than the tokenizer's 3 tokens"),
              std::string::npos) << e.what();
  }
  fs::remove(train);
}
