// data.tokenizer_file: data prepared with a given tokenizer.json (here a Hugging Face one) as it
// is, its ids those of that tokenizer; refused beside the keys that train a tokenizer.
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "trireme/io/prepare.h"

namespace trireme::io {
namespace {

const std::string kQwen2Tokenizer = std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/qwen2/tokenizer.json";

TEST(TokenizerFile, PreparesWithTheGivenTokenizer) {
  const auto dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 40; ++i) text += "床前明月光，疑是地上霜。Hello world " + std::to_string(i) + "\n";
  testing::write_file(dir / "a.txt", text);
  testing::write_file(dir / "b.txt", text);
  DataConfig dc = Config().resolve().data;
  dc.corpus = {(dir / "a.txt").string(), (dir / "b.txt").string()};
  dc.tokenizer_file = kQwen2Tokenizer;
  dc.val_fraction = 0.5;
  prepare_from_config(dc, (dir / "data").string());
  PreparedData d = load_prepared_dataset((dir / "data").string());
  EXPECT_EQ(d.tokenizer->type(), "hf");
  EXPECT_EQ(d.tokenizer->vocab_size(), 362);
  const auto given = load_tokenizer(kQwen2Tokenizer);
  EXPECT_EQ(d.tokenizer->to_json(), given->to_json());
  const std::vector<int32_t> want = given->encode(text);
  ASSERT_GE(d.train.tokens.size(), want.size());
  EXPECT_EQ(std::vector<int32_t>(d.train.tokens.begin(), d.train.tokens.begin() + std::ptrdiff_t(want.size())), want);
}

TEST(TokenizerFile, RefusedBesideTheKeysThatTrainATokenizer) {
  const std::string e = testing::config_error("[data]\ntokenizer_file = \"t.json\"\ntokenizer = \"bpe\"\n");
  EXPECT_NE(e.find("data.tokenizer: is for training a tokenizer"), std::string::npos) << e;
}

TEST(TokenizerFile, AFileThatIsNoTokenizerIsAConfigError) {
  const auto dir = testing::scratch_dir();
  testing::write_file(dir / "a.txt", "text\n");
  testing::write_file(dir / "t.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  DataConfig dc = Config().resolve().data;
  dc.corpus = {(dir / "a.txt").string()};
  dc.tokenizer_file = (dir / "t.json").string();
  try {
    prepare_from_config(dc, (dir / "data").string());
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.tokenizer_file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("WordPiece"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trireme::io
