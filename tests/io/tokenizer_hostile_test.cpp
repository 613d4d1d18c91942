// Damaged tokenizer files are refused with an error, never a crash or a gigabyte allocation
// (both cases were found by the tokenizer fuzz harness, tests/fuzz).
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/tokenizer.h"
#include "trireme/io/tokenizer_bpe.h"
#include "trireme/io/tokenizer_char.h"

using namespace trireme;
using namespace trireme::io;

TEST(TokenizerHostile, AFieldOfTheWrongTypeIsAnErrorNamingTheFile) {
  nlohmann::json j = CharTokenizer::train("abc").to_json();
  j["version"] = "1";
  auto dir = io::testing::scratch_dir();
  io::testing::write_file(dir / "tokenizer.json", j.dump());
  try {
    load_tokenizer((dir / "tokenizer.json").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("wrong type"), std::string::npos) << e.what();
  }
}

TEST(TokenizerHostile, AChainOfDoublingMergesIsRefusedBeforeItGrows) {
  // 65+65 -> 256 (2 bytes), 256+256 -> 257 (4 bytes), ...: the 7th merge would make 256 bytes.
  std::vector<std::pair<int32_t, int32_t>> merges = {{65, 65}};
  for (int32_t id = 256; id < 256 + 30; ++id) merges.emplace_back(id, id);
  try {
    BpeTokenizer t(merges);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longer than a chunk"), std::string::npos) << e.what();
  }
  // Merges up to a chunk's length stay valid.
  BpeTokenizer ok(std::vector<std::pair<int32_t, int32_t>>(merges.begin(), merges.begin() + 7));
  const std::vector<int32_t> longest = {262};
  EXPECT_EQ(ok.decode(longest), std::string(128, 'A'));
}
