// data.dir in the config: accepted alone (it round-trips through to_toml), refused beside
// data.corpus or any other key that says how to prepare data, naming both.
#include <gtest/gtest.h>

#include <string>

#include "trireme/io/config.h"

namespace trireme::io {
namespace {

std::string config_error(const std::string& toml) {
  try {
    Config::parse(toml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DataDirConfig, AloneIsAcceptedAndRoundTrips) {
  Config c = Config::parse("[data]\ndir = \"out/data\"\n");
  EXPECT_EQ(c.resolve().data.dir, "out/data");
  EXPECT_EQ(Config::parse(c.to_toml()), c);
  EXPECT_TRUE(Config().resolve().data.dir.empty());
  // Keys left at their defaults (as configs/tang_poems.toml writes them) do not conflict.
  EXPECT_EQ(config_error("[data]\ndir = \"d\"\ncorpus = [\"tang\"]\ntokenizer = \"char\"\nval_fraction = 0.1\n"), "");
}

TEST(DataDirConfig, WithCorpusOrOtherDataKeysIsRefused) {
  std::string e = config_error("[data]\ndir = \"d\"\ncorpus = \"notes/\"\n");
  EXPECT_NE(e.find("data.dir: is mutually exclusive with data.corpus"), std::string::npos) << e;
  EXPECT_NE(e.find("data.corpus = [\"notes/\"]"), std::string::npos) << e;
  e = config_error("[data]\ndir = \"d\"\ntokenizer = \"bpe\"\nsplit_seed = 3\n");
  EXPECT_NE(e.find("data.tokenizer = \"bpe\", data.split_seed = 3"), std::string::npos) << e;
  Config c;
  c.set("data.dir=d");
  EXPECT_THROW(c.set("data.val_fraction=0.2"), ConfigError);
}

}  // namespace
}  // namespace trireme::io
