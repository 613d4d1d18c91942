// The parallel.auto config key: off by default, round-trips, refuses what is not a boolean, and
// is listed in train --help.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "trireme/io/config.h"

namespace trireme::io {
namespace {

TEST(AutoKey, OffByDefaultAndRoundTrips) {
  EXPECT_FALSE(Config().resolve().parallel.auto_layout);
  const Config on = Config::parse("[parallel]\nauto = true\n", "t");
  EXPECT_TRUE(on.resolve().parallel.auto_layout);
  EXPECT_EQ(Config::parse(on.to_toml(), "saved"), on);
  EXPECT_TRUE(Config::parse("", "cli", {"parallel.auto=true"}).resolve().parallel.auto_layout);
}

TEST(AutoKey, RefusesANonBoolean) {
  EXPECT_THROW(Config::parse("", "cli", {"parallel.auto=yes"}), ConfigError);
  trireme::testing::expect_error([] { Config::parse("", "cli", {"parallel.auto=yes"}); }, "parallel.auto");
}

TEST(AutoKey, ListedInTheHelp) { EXPECT_NE(config_help().find("parallel.auto"), std::string::npos); }

}  // namespace
}  // namespace trireme::io
