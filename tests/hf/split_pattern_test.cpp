// The split patterns' matching rules on cases whose regex result can be read off the pattern
// (the fixtures check GPT-2's and Qwen2's against the library on longer texts), and BPE's
// ignore_merges.
#include <gtest/gtest.h>

#include "trireme/io/hf_split.h"
#include "trireme/io/tokenizer_hf.h"
#include "trireme/io/utf8.h"

namespace trireme {
namespace {

std::vector<std::string> pieces(io::HfSplitPattern p, const std::string& text) {
  const std::u32string cps = io::utf8_decode(text);
  std::vector<std::string> out;
  for (auto [b, e] : io::hf_split(p, cps)) out.push_back(io::utf8_encode(std::u32string_view(cps).substr(b, e - b)));
  return out;
}

using V = std::vector<std::string>;

TEST(HfSplit, Gpt2) {
  const auto p = io::HfSplitPattern::gpt2;
  EXPECT_EQ(pieces(p, "Hello  world's 123!!"), (V{"Hello", " ", " world", "'s", " 123", "!!"}));
  EXPECT_EQ(pieces(p, "I'M"), (V{"I", "'", "M"}));  // case-sensitive contractions
  EXPECT_EQ(pieces(p, "a \n\n b"), (V{"a", " \n\n", " b"}));
  EXPECT_EQ(pieces(p, "end   "), (V{"end", "   "}));
}

TEST(HfSplit, Qwen2AndLlama3) {
  EXPECT_EQ(pieces(io::HfSplitPattern::qwen2, "I'M 12345"), (V{"I", "'M", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(pieces(io::HfSplitPattern::llama3, "I'M 12345"), (V{"I", "'M", " ", "123", "45"}));
  EXPECT_EQ(pieces(io::HfSplitPattern::qwen2, "x:\n\n  y"), (V{"x", ":\n\n", " ", " y"}));
  EXPECT_EQ(pieces(io::HfSplitPattern::qwen2, "a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces(io::HfSplitPattern::qwen2, "床前，明月"), (V{"床前", "，明月"}));
}

TEST(HfSplit, PatternsAreRecognisedByTheirSource) {
  for (auto p : {io::HfSplitPattern::gpt2, io::HfSplitPattern::qwen2, io::HfSplitPattern::llama3})
    EXPECT_EQ(io::hf_split_pattern_of(io::hf_split_pattern_source(p)), p);
  EXPECT_FALSE(io::hf_split_pattern_of("\\w+"));
}

nlohmann::json tiny_tokenizer(bool ignore_merges) {
  // Byte-level symbols for "a", "b", "c"; the vocabulary has "abc" although no merge makes it.
  return {{"model",
           {{"type", "BPE"},
            {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}}},
            {"merges", {"a b"}},
            {"ignore_merges", ignore_merges}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

TEST(HfTokenizerBpe, IgnoreMergesTakesAWordInTheVocabularyWhole) {
  EXPECT_EQ(io::HfTokenizer::from_json(tiny_tokenizer(false)).encode("abc"), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(io::HfTokenizer::from_json(tiny_tokenizer(true)).encode("abc"), (std::vector<int32_t>{4}));
}

}  // namespace
}  // namespace trireme
