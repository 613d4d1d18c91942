// Token shards: round trip, header and size validation, and dataset preparation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/config.h"
#include "trireme/io/prepare.h"
#include "trireme/io/token_shard.h"
#include "trireme/io/tokenizer_char.h"

namespace trireme::io {
namespace {

// Expects parse_token_shard(bytes) to throw an error containing `needle`.
void expect_refused(const std::string& bytes, const std::string& needle) {
  try {
    parse_token_shard(bytes, "shard.bin");
    ADD_FAILURE() << "accepted a bad shard; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shard.bin"), std::string::npos) << e.what();
  }
}

TEST(TokenShard, RoundTripPicksTheWidthByVocabulary) {
  std::vector<int32_t> tokens = {0, 1, 65535, 42, 7};
  std::string small = serialize_token_shard(tokens, 65536);
  EXPECT_EQ(small.size(), kTokenShardHeaderBytes + 2 * tokens.size());
  TokenShard s = parse_token_shard(small);
  EXPECT_EQ(s.tokens, tokens);
  EXPECT_EQ(s.vocab_size, 65536);
  EXPECT_EQ(s.dtype_bytes, 2u);
  tokens.push_back(100000);
  std::string big = serialize_token_shard(tokens, 100001);
  EXPECT_EQ(big.size(), kTokenShardHeaderBytes + 4 * tokens.size());
  EXPECT_EQ(parse_token_shard(big).tokens, tokens);
  EXPECT_EQ(parse_token_shard(serialize_token_shard({}, 10)).tokens.size(), 0u);
  EXPECT_THROW(serialize_token_shard(std::vector<int32_t>{10}, 10), Error);
}

TEST(TokenShard, FileRoundTrip) {
  auto dir = testing::scratch_dir();
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  std::string path = (dir / "t.bin").string();
  write_token_shard(path, tokens, 10);
  EXPECT_EQ(read_token_shard(path).tokens, tokens);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(TokenShard, RefusesForeignTruncatedAndPaddedFiles) {
  std::string good = serialize_token_shard(std::vector<int32_t>{1, 2, 3, 4}, 100);
  expect_refused("", "not a trireme token shard");
  expect_refused("PK\x03\x04 a zip file, not a shard at all........", "not a trireme token shard");
  expect_refused(good.substr(0, 5), "truncated");
  expect_refused(good.substr(0, 20), "truncated");
  expect_refused(good.substr(0, good.size() - 1), "truncated");
  expect_refused(good.substr(0, good.size() - 1), "found 39 bytes");
  expect_refused(good + "xx", "2 trailing byte(s)");

  std::string v2 = good;
  v2[8] = 2;
  expect_refused(v2, "unsupported token shard version 2");
  std::string dtype = good;
  dtype[12] = 3;
  expect_refused(dtype, "unsupported token dtype code 3");
  std::string huge = good;  // a count so large that count * width would overflow
  std::memset(huge.data() + 16, 0xFF, 8);
  expect_refused(huge, "truncated");
  std::string out_of_vocab = good;
  out_of_vocab[kTokenShardHeaderBytes] = 100;  // token 0 becomes 100 with vocabulary 100
  expect_refused(out_of_vocab, "not below the vocabulary size");
}

TEST(TokenShard, SplitPointPrefersBlankLines) {
  std::string text = "aaaa\nbbbb\n\ncccc\ndddd\n\neeee\nffff\n";
  size_t p = split_point(text, 0.4);
  EXPECT_EQ(text.substr(p), "eeee\nffff\n");
  EXPECT_EQ(split_point(text, 0.0), text.size());
  EXPECT_EQ(split_point("one line only", 0.5), 6u);
  std::string lines = "l1\nl2\nl3\nl4\n";
  EXPECT_EQ(lines.substr(split_point(lines, 0.25)), "l4\n");
  // No separators: a character boundary, never inside a multi-byte character.
  std::string cjk = "床前明月光疑是地上霜";
  size_t q = split_point(cjk, 0.5);
  EXPECT_EQ(q % 3, 0u);
  EXPECT_THROW(split_point(text, 1.0), Error);
}

TEST(TokenShard, PrepareDatasetWritesShardsAndTokenizer) {
  auto dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 20; ++i) text += "《题" + std::to_string(i) + "》\n作者：某\n春眠不觉晓，处处闻啼鸟。\n\n";
  CharTokenizer tok = CharTokenizer::train(text);
  PreparedDataset d = prepare_dataset(text, tok, (dir / "data").string(), 0.1);
  TokenShard train = read_token_shard(d.train_path), val = read_token_shard(d.val_path);
  EXPECT_EQ(tok.decode(train.tokens) + tok.decode(val.tokens), text);
  EXPECT_TRUE(tok.decode(val.tokens).starts_with("《题18》")) << tok.decode(val.tokens);
  EXPECT_EQ(int64_t(train.tokens.size()), d.train_tokens);
  EXPECT_EQ(train.vocab_size, tok.vocab_size());
  auto back = load_tokenizer(d.tokenizer_path);
  EXPECT_EQ(back->encode(text), tok.encode(text));
}

}  // namespace
}  // namespace trireme::io

namespace trireme::io {
namespace {

TEST(Prepare, FromConfigIsDeterministicAndLoadsBack) {
  auto dir = testing::scratch_dir();
  testing::write_file(dir / "a.txt", "春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。");
  testing::write_file(dir / "b.txt", "The quick brown fox jumps over the lazy dog.\nAgain: the quick brown fox.");
  DataConfig data;
  data.corpus = {(dir / "a.txt").string(), (dir / "b.txt").string()};
  data.tokenizer = "bpe";
  data.bpe_vocab_size = 300;
  data.val_fraction = 0.3;
  PreparedDataset p1 = prepare_from_config(data, (dir / "one").string());
  PreparedDataset p2 = prepare_from_config(data, (dir / "two").string());
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    EXPECT_EQ(testing::read_file(dir / "one" / f), testing::read_file(dir / "two" / f)) << f;
  }
  PreparedData loaded = load_prepared_dataset((dir / "one").string());
  EXPECT_EQ(int64_t(loaded.train.tokens.size()), p1.train_tokens);
  // Two documents: one is held out whole (b.txt with this seed), joined back by the blank line.
  std::string text = loaded.tokenizer->decode(loaded.train.tokens) + "\n" + loaded.tokenizer->decode(loaded.val.tokens);
  EXPECT_EQ(text, load_corpus(data.corpus).text());
  EXPECT_TRUE(loaded.tokenizer->decode(loaded.val.tokens).starts_with("The quick"));

  // Shards from another tokenizer are refused.
  write_token_shard((dir / "one" / "val.bin").string(), std::vector<int32_t>{1, 2}, 1000);
  EXPECT_THROW(load_prepared_dataset((dir / "one").string()), Error);
}

TEST(Prepare, DefaultPoemCorpus) {
  if (!testing::poems_installed()) GTEST_SKIP() << "fortunes-zh is not installed";
  auto dir = testing::scratch_dir();
  DataConfig data = Config().resolve().data;  // "tang", char tokenizer, 10% validation
  PreparedDataset p = prepare_from_config(data, dir.string());
  PreparedData d = load_prepared_dataset(dir.string());
  EXPECT_GT(p.train_tokens, 30000);
  EXPECT_GT(p.val_tokens, 3000);
  EXPECT_EQ(d.train.dtype_bytes, 2u);
  std::string val = d.tokenizer->decode(d.val.tokens);
  EXPECT_TRUE(val.starts_with("题目:《") || val.starts_with("《")) << val.substr(0, 60);
  EXPECT_EQ(std::count(d.val.tokens.begin(), d.val.tokens.end(), 0), 0) << "no <unk> in validation";
}

}  // namespace
}  // namespace trireme::io

namespace trireme::io {
namespace {

TEST(TokenShard, FileReaderRefusesBadFilesToo) {
  auto dir = testing::scratch_dir();
  std::string good = serialize_token_shard(std::vector<int32_t>{1, 2, 3, 4}, 100);
  struct Case {
    std::string bytes, needle;
  };
  for (const Case& c : {Case{"", "not a trireme token shard"}, Case{"hello world, not a shard at all", "not a trireme"},
                        Case{good.substr(0, 12), "truncated"}, Case{good.substr(0, good.size() - 2), "truncated"},
                        Case{good + "x", "1 trailing byte(s)"}}) {
    testing::write_file(dir / "s.bin", c.bytes);
    try {
      read_token_shard((dir / "s.bin").string());
      ADD_FAILURE() << "accepted; expected " << c.needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("s.bin"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_token_shard((dir / "missing.bin").string()), Error);
}

}  // namespace
}  // namespace trireme::io
