// io::HfTokenizer against the `tokenizers` library: the ids and decodings that
// tests/fixtures/hf/make_fixtures.py recorded for Chinese, English, mixed, emoji, invalid UTF-8,
// special-token and NFC cases, with a GPT-2-style and a Qwen2-style tokenizer.json.
#include <gtest/gtest.h>

#include "hf_fixtures.h"
#include "trireme/io/tokenizer_hf.h"

namespace trireme {
namespace {

using test::from_hex;
using test::hf_fixture;

void check_style(const std::string& style, const std::string& folder) {
  const io::HfTokenizer tok = io::HfTokenizer::load(hf_fixture(folder + "/tokenizer.json"));
  const nlohmann::json cases = test::read_json(hf_fixture("tokenizer_cases.json"))["cases"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = from_hex(c["bytes_hex"]);
    const auto& want = c["expected"][style];
    SCOPED_TRACE(style + " on bytes " + c["bytes_hex"].get<std::string>());
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, want["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(want["ids"].get<std::vector<int32_t>>(), false), want["decoded"].get<std::string>());
    EXPECT_EQ(tok.decode(want["ids"].get<std::vector<int32_t>>(), true), want["decoded_skip_special"].get<std::string>());
    EXPECT_EQ(tok.decode(want["prefix_ids"].get<std::vector<int32_t>>(), false), want["prefix_decoded"].get<std::string>());
  }
}

TEST(HfTokenizerParity, Gpt2StyleMatchesTheTokenizersLibrary) { check_style("gpt2", "gpt2"); }
TEST(HfTokenizerParity, Qwen2StyleMatchesTheTokenizersLibrary) { check_style("qwen2", "qwen2"); }

TEST(HfTokenizerParity, GenericFactoryReadsTokenizerJson) {
  auto tok = io::load_tokenizer(hf_fixture("qwen2/tokenizer.json"));
  EXPECT_EQ(tok->type(), "hf");
  EXPECT_EQ(tok->vocab_size(), 362);
  EXPECT_EQ(tok->decode(tok->encode("床前明月光 and 😀")), "床前明月光 and 😀");
}

}  // namespace
}  // namespace trireme
