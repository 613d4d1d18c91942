// Sizes from input (config keys, --set, safetensors headers, token shards, sample indices):
// out of range or overflowing values are clear errors naming the key or entry, never a crash.
#include <gtest/gtest.h>

#include "io_test_util.h"

#include <cstring>

#include "trireme/io/config.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/safetensors.h"
#include "trireme/io/token_shard.h"

using namespace trireme;
using namespace trireme::io;

namespace {

std::string config_error(const std::vector<std::string>& overrides) {
  return trireme::io::testing::config_error("", overrides);
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

std::string with_header(const std::string& json, const std::string& data) {
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + json + data;
}

std::string safetensors_error(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace

TEST(SizeLimits, HugeBatchSizeIsRefusedNamingTheKey) {
  EXPECT_CONTAINS(config_error({"train.batch_size=1152921504606846976"}),
                  "train.batch_size: expected an integer in [1, 16777216], got 1152921504606846976");
}

TEST(SizeLimits, HugeModelSizesAreRefusedNamingTheKey) {
  EXPECT_CONTAINS(config_error({"model.d_model=1623261534117349", "model.n_head=1"}),
                  "model.d_model: expected an integer in [1, 1048576], got 1623261534117349");
  EXPECT_CONTAINS(config_error({"model.block_size=9223372036854775807"}),
                  "model.block_size: expected an integer in [1, 1048576]");
  EXPECT_CONTAINS(config_error({"model.n_layer=1000000"}), "model.n_layer: expected an integer in [1, 65536]");
  EXPECT_CONTAINS(config_error({"model.n_head=9223372036854775807"}), "model.n_head: expected an integer in [1, 65536]");
  // The same bounds apply to TOML text (a checkpoint's state.json carries one).
  try {
    Config::parse("[model]\nd_model = 1623261534117349\nn_head = 1\n", "state.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "model.d_model: expected an integer in [1, 1048576], got 1623261534117349 (state.json line 2)");
  }
}

TEST(SizeLimits, EveryIntegerKeyHasAnUpperBoundExceptTheSeeds) {
  for (const auto& k : train_config_schema()) {
    if (k.type != ConfigType::integer || k.path == "train.seed" || k.path == "data.split_seed") continue;
    EXPECT_TRUE(k.max.has_value()) << k.path;
    EXPECT_CONTAINS(config_error({k.path + "=9223372036854775807"}), k.path + ": expected an integer in");
  }
  EXPECT_CONTAINS(config_error({"parallel.bucket_mb=1e300"}), "parallel.bucket_mb: expected a float in (0, 1048576]");
  EXPECT_CONTAINS(config_error({"train.threads=4294967297"}), "train.threads");
}

TEST(SizeLimits, TokensOverTheRunMustFitACounter) {
  EXPECT_CONTAINS(config_error({"train.steps=1000000000000", "train.batch_size=16777216", "model.block_size=1048576"}),
                  "train.steps: train.steps x train.batch_size x model.block_size = 1000000000000 x 16777216 x 1048576");
  EXPECT_NO_THROW(Config::parse("", "t", {"train.steps=1000000000000", "train.batch_size=16", "model.block_size=1024"}));
}

TEST(SizeLimits, WarmupOverTheWholeRunIsValid) {
  TrainConfig tc = Config::parse("", "t", {"train.steps=10", "schedule.warmup_steps=10"}).resolve();
  EXPECT_EQ(tc.schedule.warmup_steps, tc.train.steps);
}

TEST(SizeLimits, SafetensorsShapeWhoseByteCountWrapsIsRefused) {
  // [2^61] F64 is 2^64 bytes, which wraps to the 0 bytes the offsets claim.
  std::string e = safetensors_error(
      with_header(R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""));
  EXPECT_CONTAINS(e, "test.safetensors: not a valid safetensors file: entry 'x'");
  EXPECT_CONTAINS(e, "byte count");
  e = safetensors_error(
      with_header(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  EXPECT_CONTAINS(e, "entry 'x'");
  e = safetensors_error(
      with_header(R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""));
  EXPECT_CONTAINS(e, "entry 'x'");
  // Offsets beyond the data, or reversed, are refused before any copy.
  e = safetensors_error(with_header(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,0]}})", ""));
  EXPECT_CONTAINS(e, "out of bounds");
  e = safetensors_error(with_header(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"));
  EXPECT_CONTAINS(e, "out of bounds");
}

TEST(SizeLimits, DataLoaderRefusesSampleRangesThatOverflow) {
  DataLoader loader(std::vector<int32_t>(64, 1), 8, 1);
  EXPECT_THROW(loader.samples(0, int64_t(1) << 60), Error);  // (2^60, 8) i64 overflows the byte count
  EXPECT_THROW(loader.samples(INT64_MAX - 1, 4), Error);
  EXPECT_THROW(loader.batch(INT64_MAX / 2, 8), Error);  // step x global batch
  EXPECT_EQ(loader.samples(3, 2).inputs.sizes(), (Shape{2, 8}));
}

TEST(SizeLimits, TokenShardIdsMustFitInt32) {
  std::string bytes(kTokenShardHeaderBytes, '\0');
  std::memcpy(bytes.data(), kTokenShardMagic, 8);
  uint32_t version = kTokenShardVersion, width = 4;
  uint64_t count = 1, vocab = uint64_t(1) << 32;
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 12, &width, 4);
  std::memcpy(bytes.data() + 16, &count, 8);
  std::memcpy(bytes.data() + 24, &vocab, 8);
  uint32_t token = 3000000000u;  // below the vocabulary, but negative as an int32
  bytes.append(reinterpret_cast<const char*>(&token), 4);
  try {
    parse_token_shard(bytes, "x.bin");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "x.bin: token 3000000000 at position 0 does not fit in an int32 token id");
  }
}
