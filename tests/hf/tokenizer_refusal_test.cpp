// io::HfTokenizer refuses what it cannot reproduce exactly, naming the field and the value.
#include <gtest/gtest.h>

#include "hf_fixtures.h"
#include "trireme/io/config.h"
#include "trireme/io/tokenizer_hf.h"
#include "trireme/io/unicode.h"

namespace trireme {
namespace {

void expect_refused(const nlohmann::json& j, const std::string& needle) {
  try {
    io::HfTokenizer::from_json(j, "t.json");
    ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.json"), std::string::npos) << e.what();
  }
}

nlohmann::json qwen2() { return test::read_json(test::hf_fixture("qwen2/tokenizer.json")); }

TEST(HfTokenizerRefusal, UnknownModelType) {
  auto j = qwen2();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, "WordPiece");
}

TEST(HfTokenizerRefusal, UnknownSplitPattern) {
  auto j = qwen2();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_refused(j, "\\\\w+");
}

TEST(HfTokenizerRefusal, UnsupportedNormalizerAndAddedTokenOptions) {
  auto j = qwen2();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_refused(j, "NFKC");
  j = qwen2();
  j["added_tokens"][0]["lstrip"] = true;
  expect_refused(j, "lstrip");
}

TEST(HfTokenizerRefusal, MergeOutsideTheVocabulary) {
  auto j = qwen2();
  j["model"]["merges"].push_back(nlohmann::json::array({"zz", "qq"}));
  expect_refused(j, "zz qq");
}

TEST(HfTokenizerRefusal, IdsThatAreNotSmallIntegers) {
  auto j = qwen2();
  j["model"]["vocab"]["!"] = 1e80;  // a float: converting it to an integer would be undefined
  expect_refused(j, "not an integer");
  j = qwen2();
  j["model"]["vocab"]["!"] = 2147483647;  // a table of 2^31 entries for one token
  expect_refused(j, "over the limit");
  j = qwen2();
  j["added_tokens"][0]["id"] = -1.5;
  expect_refused(j, "not an integer");
}

TEST(Unicode, NfcComposesReordersAndMapsSingletons) {
  EXPECT_EQ(io::unicode_nfc(U"e\u0301"), U"\u00e9");
  EXPECT_EQ(io::unicode_nfc(U"\u1100\u1161\u11a8"), U"\uac01");  // Hangul L V T
  EXPECT_EQ(io::unicode_nfc(U"\uf900"), U"\u8c48");               // CJK compatibility ideograph
  EXPECT_EQ(io::unicode_nfc(U"a\u0323\u0302"), U"\u1ead");        // ậ -> ậ
  EXPECT_EQ(io::unicode_nfc(U"a\u0302\u0323"), U"\u1ead");        // marks reordered first
  EXPECT_EQ(io::unicode_nfc(U"床前明月光"), U"床前明月光");
}

}  // namespace
}  // namespace trireme
