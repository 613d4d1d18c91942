// Tokenizers: round trips (ASCII, CJK, emoji, empty, invalid bytes), deterministic BPE
// training, compression of the poem corpus, and JSON save/load.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/tokenizer_bpe.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/io/utf8.h"

namespace trireme::io {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

const std::vector<std::string>& samples() {
  static const std::vector<std::string> s = {
      "",
      "hello, world! The quick brown fox.\n  indented\ttab",
      "《静夜思》\n作者：李白\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。",
      "emoji 😀👍🏽🇨🇳 and family 👨‍👩‍👧 mixed with 中文 and ascii",
      "numbers 12345 ９４６ and punctuation ...!?;:",
  };
  return s;
}

const std::string kTraining =
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。\n\n"
    "the cat sat on the mat; the cat ate the rat.\n\n"
    "😀 😀 😀 emoji emoji 👍🏽\n";

TEST(CharTokenizer, VocabularyIsSortedWithUnkFirst) {
  CharTokenizer tok = CharTokenizer::train("cab\u660e");
  ASSERT_EQ(tok.vocab_size(), 5);
  EXPECT_EQ(tok.token_to_string(0), "<unk>");
  EXPECT_EQ(tok.encode("abc明"), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(tok.token_to_string(4), "明");
}

TEST(CharTokenizer, RoundTripsTextOverItsVocabulary) {
  std::string all;
  for (const auto& s : samples()) all += s;
  CharTokenizer tok = CharTokenizer::train(all);
  for (const auto& s : samples()) {
    auto ids = tok.encode(s);
    EXPECT_EQ(ids.size(), utf8_decode(s).size());
    EXPECT_EQ(tok.decode(ids), s);
  }
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(CharTokenizer, UnknownAndInvalidDecodeToReplacement) {
  CharTokenizer tok = CharTokenizer::train("abc");
  EXPECT_EQ(tok.encode("aZc"), (std::vector<int32_t>{1, CharTokenizer::kUnk, 3}));
  EXPECT_EQ(tok.decode(tok.encode("aZc")), "a" + kReplacement + "c");
  // Invalid UTF-8: one U+FFFD per maximal subpart, never a throw.
  auto ids = tok.encode("a\xff\xE6\x98" "b");
  EXPECT_EQ(tok.decode(ids), "a" + kReplacement + kReplacement + "b");
  EXPECT_THROW(tok.decode(std::vector<int32_t>{4}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

TEST(BpeTokenizer, RoundTripsAnyBytes) {
  BpeTokenizer tok = BpeTokenizer::train(kTraining, 300);
  EXPECT_GT(tok.vocab_size(), 256);
  for (const auto& s : samples()) EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  // Invalid UTF-8 falls back to byte tokens and comes back byte for byte.
  std::string invalid = "ok\xff\xfe\xE6\x98 \xED\xA0\x80 \xC0\xAF 明\x80";
  EXPECT_EQ(tok.decode(tok.encode(invalid)), invalid);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, char(b));
    EXPECT_EQ(tok.decode(tok.encode(one)), one);
  }
  // Untrained tokenizer = plain bytes.
  BpeTokenizer bytes({});
  EXPECT_EQ(bytes.encode("明").size(), 3u);
  EXPECT_EQ(bytes.decode(bytes.encode("😀")), "😀");
}

TEST(BpeTokenizer, DisplayStringsAreValidUtf8) {
  BpeTokenizer tok = BpeTokenizer::train(kTraining, 300);
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    EXPECT_TRUE(utf8_is_valid(tok.token_to_string(id))) << id;
  }
  EXPECT_EQ(tok.token_to_string(0xE6), "<0xE6>");
  EXPECT_EQ(tok.token_to_string('\n'), "\\n");
}

TEST(BpeTokenizer, PretokenizerKeepsRunsAndLeadingSpaces) {
  auto chunks = bpe_pretokenize("the  cat, 床前明月光。\n\n42x");
  std::vector<std::string> got(chunks.begin(), chunks.end());
  EXPECT_EQ(got, (std::vector<std::string>{"the", " ", " cat", ",", " 床前明月光", "。", "\n\n", "42", "x"}));
  std::string joined;
  for (auto c : chunks) joined += c;
  EXPECT_EQ(joined, "the  cat, 床前明月光。\n\n42x");
  std::string long_run(1000, 'a');
  for (auto c : bpe_pretokenize(long_run)) EXPECT_LE(c.size(), kBpeMaxChunkBytes);
}

TEST(BpeTokenizer, TrainingIsDeterministic) {
  BpeTokenizer a = BpeTokenizer::train(kTraining, 320);
  BpeTokenizer b = BpeTokenizer::train(kTraining, 320);
  EXPECT_EQ(a.merges(), b.merges());
  ASSERT_FALSE(a.merges().empty());
  // Encoding applies the merges as training did, so the last merged token (which training
  // found at least twice, and no later merge can consume) appears in the encoded training text.
  std::set<int32_t> used;
  for (int32_t id : a.encode(kTraining)) used.insert(id);
  EXPECT_TRUE(used.count(int32_t(a.vocab_size() - 1)));
}

TEST(BpeTokenizer, MergesMostFrequentPairWithSmallestIdOnTies) {
  // "ab" occurs 3 times, "cd" 3 times, "xy" once; ties go to the smaller pair ("ab" < "cd").
  BpeTokenizer tok = BpeTokenizer::train("cd,ab,cd,ab,cd,ab,xy", 300);
  ASSERT_GE(tok.merges().size(), 2u);
  EXPECT_EQ(tok.merges()[0], std::make_pair(int32_t('a'), int32_t('b')));
  EXPECT_EQ(tok.merges()[1], std::make_pair(int32_t('c'), int32_t('d')));
  // Stops when no pair occurs twice, below the target size.
  EXPECT_LT(tok.vocab_size(), 300);
}

TEST(BpeTokenizer, TrainsOnPoemsQuicklyAndCompresses) {
  if (!testing::poems_installed()) GTEST_SKIP() << "fortunes-zh is not installed";
  const std::string& text = testing::poem_text();
  auto t0 = std::chrono::steady_clock::now();
  BpeTokenizer tok = BpeTokenizer::train(text, 2000);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok.vocab_size(), 2000);
  EXPECT_LT(seconds, 10.0);  // a few seconds at most even in a debug or sanitizer build
  auto ids = tok.encode(text);
  // The corpus has ~2800 distinct characters, more than the vocabulary, so tokens stay near
  // one per character (~39k) but far below one per byte (~110k).
  EXPECT_LT(ids.size(), text.size() / 2);
  EXPECT_EQ(tok.decode(ids), text);
  // Determinism on the real corpus too.
  EXPECT_EQ(BpeTokenizer::train(text, 2000).merges(), tok.merges());
}

TEST(Tokenizer, JsonSaveLoadRoundTrip) {
  auto dir = testing::scratch_dir();
  for (std::string kind : {"char", "bpe"}) {
    auto tok = train_tokenizer(kind, kTraining, 300);
    std::string path = (dir / (kind + ".json")).string();
    tok->save(path);
    auto back = load_tokenizer(path);
    EXPECT_EQ(back->type(), kind);
    EXPECT_EQ(back->vocab_size(), tok->vocab_size());
    EXPECT_EQ(back->to_json(), tok->to_json());
    for (const auto& s : samples()) EXPECT_EQ(back->encode(s), tok->encode(s));
  }
}

TEST(Tokenizer, BadJsonIsRefused) {
  using nlohmann::json;
  EXPECT_THROW(tokenizer_from_json(json::object()), Error);
  EXPECT_THROW(tokenizer_from_json({{"type", "wordpiece"}}), Error);
  EXPECT_THROW(tokenizer_from_json({{"type", "char"}, {"version", 1}, {"vocab", {"b", "a"}}}), Error);
  EXPECT_THROW(tokenizer_from_json({{"type", "char"}, {"version", 1}, {"vocab", {"ab"}}}), Error);
  json bpe = BpeTokenizer::train(kTraining, 300).to_json();
  bpe["merges"].push_back({5000, 1});  // refers to a token that does not exist yet
  EXPECT_THROW(tokenizer_from_json(bpe), Error);
  auto dir = testing::scratch_dir();
  testing::write_file(dir / "t.json", "{not json");
  EXPECT_THROW(load_tokenizer((dir / "t.json").string()), Error);
}

}  // namespace
}  // namespace trireme::io
