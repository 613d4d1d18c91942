// parallel.zero takes the ZeRO stage, 0 to 3; the booleans it took before stages 2 and 3 keep
// their meaning (true = 1); stages out of range, ZeRO with SGD and ZeRO-3 in a pipeline are
// refused naming the key.
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "trireme/io/config.h"

namespace trireme::io {
namespace {

using testing::config_error;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

TEST(ZeroStageConfig, StagesAndBooleans) {
  EXPECT_EQ(Config::parse("[parallel]\ndp = 2\nzero = 3\n").resolve().parallel.zero, 3);
  EXPECT_EQ(Config::parse("[parallel]\ndp = 2\nzero = true\n").resolve().parallel.zero, 1);
  EXPECT_EQ(Config::parse("[parallel]\ndp = 2\nzero = false\n").resolve().parallel.zero, 0);
  EXPECT_EQ(Config::parse("", "cfg", {"parallel.zero=2"}).resolve().parallel.zero, 2);
  EXPECT_EQ(Config::parse("", "cfg", {"parallel.zero=true"}).resolve().parallel.zero, 1);
  EXPECT_EQ(Config::parse("[parallel]\npp = 2\nzero = 2\n[model]\nn_layer = 4\n").resolve().parallel.zero, 2);
}

TEST(ZeroStageConfig, RefusalsNameTheKeyAndTheChoices) {
  EXPECT_CONTAINS(config_error("[parallel]\nzero = 4\n"), "parallel.zero: expected an integer in [0, 3] (true = 1, false = 0), got 4");
  EXPECT_CONTAINS(config_error("[parallel]\nzero = \"full\"\n"), "parallel.zero: expected an integer in [0, 3]");
  EXPECT_CONTAINS(config_error("[optim]\nname = \"sgd\"\n[parallel]\ndp = 2\nzero = 2\n"),
                  "parallel.zero: ZeRO-2 shards AdamW's state, but optim.name = \"sgd\"");
  EXPECT_CONTAINS(config_error("[model]\nn_layer = 4\n[parallel]\npp = 2\nzero = 3\n"),
                  "parallel.zero: ZeRO-3 gathers each block's parameters around its forward and backward, which "
                  "pipeline stages do not do yet, but parallel.pp = 2");
}

}  // namespace
}  // namespace trireme::io
