// [model] arch and the llama keys: validated with the other keys, one line per problem naming
// the key, and listed in `trireme train --help`.
#include <gtest/gtest.h>

#include "io_test_util.h"

namespace trireme::io {
namespace {

using testing::config_error;

TEST(ModelArchConfig, LlamaKeysResolve) {
  const TrainConfig c = Config::parse(
      "[model]\narch = \"llama\"\nd_model = 64\nn_head = 4\nn_kv_head = 2\nrope_theta = 1e6\nqkv_bias = true\n"
      "intermediate_size = 96\nnorm_eps = 1e-6\nvocab_size = 400\n[parallel]\ntp = 2\n").resolve();
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.rope_theta, 1e6);
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_EQ(c.model.intermediate_size, 96);
  EXPECT_EQ(c.model.vocab_size, 400);
}

TEST(ModelArchConfig, RefusesWhatTheArchitectureCannotHold) {
  EXPECT_NE(config_error("[model]\narch = \"mamba\"\n").find("model.arch"), std::string::npos);
  EXPECT_NE(config_error("[model]\nn_kv_head = 2\n").find("model.n_kv_head: applies to model.arch = \"llama\""),
            std::string::npos);
  EXPECT_NE(config_error("[model]\narch = \"llama\"\nn_head = 4\nn_kv_head = 3\n").find("model.n_kv_head: expected a divisor"),
            std::string::npos);
  EXPECT_NE(config_error("[model]\narch = \"llama\"\nbias = true\n").find("model.qkv_bias"), std::string::npos);
  EXPECT_NE(config_error("[model]\narch = \"llama\"\nd_model = 12\nn_head = 4\n").find("even head size"),
            std::string::npos);
}

TEST(ModelArchConfig, TensorParallelismMustSplitKvHeads) {
  const std::string e =
      config_error("[model]\narch = \"llama\"\nd_model = 64\nn_head = 4\nn_kv_head = 1\n[parallel]\ntp = 2\n");
  EXPECT_NE(e.find("parallel.tp: expected a divisor of model.n_kv_head = 1"), std::string::npos) << e;
}

TEST(ModelArchConfig, HelpListsTheKeys) {
  const std::string help = config_help();
  for (const char* key : {"model.arch", "model.n_kv_head", "model.rope_theta", "model.intermediate_size",
                          "model.norm_eps", "model.qkv_bias", "model.vocab_size"})
    EXPECT_NE(help.find(key), std::string::npos) << key;
}

}  // namespace
}  // namespace trireme::io
