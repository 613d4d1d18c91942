// Generation's inputs (train/generate.h): top-p keeps only the nucleus, the prompt is refused when
// it is not UTF-8 or holds characters the tokenizer lacks (each named), an empty prompt starts
// from a newline, and samples of one seed differ.
#include <gtest/gtest.h>

#include <set>

#include "trireme/io/tokenizer_bpe.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/train/generate.h"

namespace trireme::train {
namespace {

TEST(GeneratePrompt, TopPKeepsOnlyTheNucleus) {
  // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.5 keeps token 0 alone, 0.8 keeps 0 and 1.
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  std::set<int32_t> half, most, all;
  for (uint64_t i = 0; i < 400; ++i) {
    half.insert(sample_token(logits, 1.0, 0, 1, i, 0.5));
    most.insert(sample_token(logits, 1.0, 0, 1, i, 0.8));
    all.insert(sample_token(logits, 1.0, 0, 1, i, 1.0));
    EXPECT_EQ(sample_token(logits, 1.0, 0, 1, i), sample_token(logits, 1.0, 0, 1, i, 1.0)) << "1.0 changes nothing";
  }
  EXPECT_EQ(half, (std::set<int32_t>{0}));
  EXPECT_EQ(most, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(all, (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_THROW(sample_token(logits, 1.0, 0, 1, 0, 0.0), Error);
}

TEST(GeneratePrompt, InvalidUtf8AndUnknownCharactersAreNamed) {
  const io::CharTokenizer chars = io::CharTokenizer::train("床前明月光\n");
  EXPECT_EQ(prompt_problem(chars, "明月"), "");
  EXPECT_EQ(prompt_problem(chars, ""), "");
  const std::string bad = prompt_problem(chars, "明\xff月");
  EXPECT_NE(bad.find("not valid UTF-8 (byte 3"), std::string::npos) << bad;
  const std::string unknown = prompt_problem(chars, "明月xx霜");
  EXPECT_NE(unknown.find("2 characters"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'x' (U+0078)"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'霜' (U+971C)"), std::string::npos) << unknown;
  // Byte-level BPE has every byte: only UTF-8 validity applies.
  const io::BpeTokenizer bpe = io::BpeTokenizer::train("床前明月光 the moon", 260);
  EXPECT_EQ(prompt_problem(bpe, "anything 霜"), "");
  EXPECT_NE(prompt_problem(bpe, "\xc3"), "");
}

TEST(GeneratePrompt, AnEmptyPromptStartsFromANewline) {
  const io::CharTokenizer with_newline = io::CharTokenizer::train("床前\n明月");
  EXPECT_EQ(with_newline.decode(std::vector<int32_t>{start_token(with_newline)}), "\n");
  const io::CharTokenizer without = io::CharTokenizer::train("床前明月");
  EXPECT_EQ(start_token(without), 1) << "the first character, not <unk>";
  const io::BpeTokenizer bpe = io::BpeTokenizer::train("床前明月光 the moon", 260);
  EXPECT_EQ(bpe.decode(std::vector<int32_t>{start_token(bpe)}), "\n");
}

TEST(GeneratePrompt, SamplesOfOneSeedDifferAndRepeat) {
  const io::CharTokenizer tok = io::CharTokenizer::train("床前明月光疑是地上霜\n");
  auto model = [&] {
    return std::make_unique<models::GPT>(
        models::GPTConfig{.vocab_size = tok.vocab_size(), .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 16}, 3);
  };
  TextGenerator g(model(), std::make_unique<io::CharTokenizer>(tok));
  const std::string a = g.generate("", {.max_new_tokens = 12, .seed = 5, .sample = 0});
  const std::string b = g.generate("", {.max_new_tokens = 12, .seed = 5, .sample = 1});
  EXPECT_NE(a, b);
  EXPECT_EQ(a, g.generate("", {.max_new_tokens = 12, .seed = 5, .sample = 0}));
  EXPECT_THROW(g.generate("明月x", {.max_new_tokens = 1}), Error) << "unknown characters are refused";
}

}  // namespace
}  // namespace trireme::train
