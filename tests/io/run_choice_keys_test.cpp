// The run choices that are config keys rather than environment variables: parallel.peer_allreduce
// (which GPU groups use the copy-engine collectives) and train.memory_check (whether a run the
// memory estimate says cannot fit is refused). Each parses, defaults to today's behaviour,
// round-trips through to_toml, and refuses a bad value naming the key and what it accepts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io_test_util.h"
#include "trireme/io/config.h"

namespace trireme::io {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

using testing::config_error;

TEST(RunChoiceKeys, Defaults) {
  const TrainConfig tc = Config().resolve();
  EXPECT_EQ(tc.parallel.peer_allreduce, "auto");
  EXPECT_TRUE(tc.train.memory_check);
}

TEST(RunChoiceKeys, PeerAllReduceTakesAutoOffOn) {
  for (const std::string v : {"auto", "off", "on"}) {
    EXPECT_EQ(Config::parse("[parallel]\npeer_allreduce = \"" + v + "\"\n").resolve().parallel.peer_allreduce, v);
    EXPECT_EQ(Config::parse("", "cli", {"parallel.peer_allreduce=" + v}).resolve().parallel.peer_allreduce, v);
  }
  Config c = Config::parse("[parallel]\npeer_allreduce = \"off\"\n");
  EXPECT_EQ(Config::parse(c.to_toml()), c);
}

TEST(RunChoiceKeys, PeerAllReduceRefusesOtherValuesNamingTheKeyAndTheChoices) {
  // What the environment variable took ("0", "1") is not a value of the key.
  for (const std::string v : {"\"1\"", "\"0\"", "\"yes\"", "\"\"", "1", "true"}) {
    const std::string e = config_error("[parallel]\npeer_allreduce = " + v + "\n");
    EXPECT_CONTAINS(e, "parallel.peer_allreduce: expected one of \"auto\", \"off\"");
    EXPECT_CONTAINS(e, "\"on\"");
  }
  EXPECT_CONTAINS(config_error("", {"parallel.peer_allreduce=nccl"}), "parallel.peer_allreduce: expected one of");
}

TEST(RunChoiceKeys, MemoryCheckIsABoolean) {
  EXPECT_FALSE(Config::parse("[train]\nmemory_check = false\n").resolve().train.memory_check);
  EXPECT_FALSE(Config::parse("", "cli", {"train.memory_check=false"}).resolve().train.memory_check);
  EXPECT_TRUE(Config::parse("", "cli", {"train.memory_check=true"}).resolve().train.memory_check);
  Config c = Config::parse("[train]\nmemory_check = false\n");
  EXPECT_EQ(Config::parse(c.to_toml()), c);
  for (const std::string v : {"0", "\"no\"", "\"false\""})
    EXPECT_CONTAINS(config_error("[train]\nmemory_check = " + v + "\n"), "train.memory_check: expected a boolean");
}

TEST(RunChoiceKeys, HelpListsThemWithTheirChoices) {
  const std::string help = config_help();
  EXPECT_CONTAINS(help, "parallel.peer_allreduce");
  EXPECT_CONTAINS(help, "train.memory_check");
}

}  // namespace
}  // namespace trireme::io
