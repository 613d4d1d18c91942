// parallel.peer_allreduce reaches the NCCL groups as dist::PeerAllReduceMode
// (ParallelJob::connect): every value the config accepts names a mode, and the mapping is the
// one the key's help describes.
#include <gtest/gtest.h>

#include "trireme/core/error.h"
#include "trireme/dist/peer_all_reduce_mode.h"
#include "trireme/io/config.h"

using namespace trireme;

TEST(PeerAllReduceKey, EveryAcceptedValueNamesAMode) {
  const io::ConfigKey* key = nullptr;
  for (const auto& k : io::train_config_schema())
    if (k.path == "parallel.peer_allreduce") key = &k;
  ASSERT_NE(key, nullptr);
  ASSERT_FALSE(key->choices.empty());
  for (const auto& v : key->choices) {
    EXPECT_NO_THROW(dist::parse_peer_all_reduce_mode(v)) << v;
    EXPECT_EQ(dist::peer_all_reduce_mode_name(dist::parse_peer_all_reduce_mode(v)), v);
  }
  EXPECT_EQ(dist::parse_peer_all_reduce_mode(std::get<std::string>(key->default_value)),
            dist::PeerAllReduceMode::automatic);
  EXPECT_EQ(dist::parse_peer_all_reduce_mode("off"), dist::PeerAllReduceMode::off);
  EXPECT_EQ(dist::parse_peer_all_reduce_mode("on"), dist::PeerAllReduceMode::on);
}

TEST(PeerAllReduceKey, AnUnknownModeIsRefusedNamingTheChoices) {
  try {
    dist::parse_peer_all_reduce_mode("1");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mode '1' (choose auto, off or on)"), std::string::npos) << e.what();
  }
}
