// The store's hex encoding of binary handles (NCCL ids, CUDA IPC handles).
#include <gtest/gtest.h>

#include <array>

#include "trireme/dist/hex.h"

using namespace trireme::dist;

TEST(Hex, BytesRoundTrip) {
  const std::array<unsigned char, 5> bytes = {0x00, 0x0f, 0xa5, 0xff, 0x10};
  const std::string s = to_hex(bytes.data(), bytes.size());
  EXPECT_EQ(s, "000fa5ff10");
  std::array<unsigned char, 5> back{};
  ASSERT_TRUE(from_hex(s, back.data(), back.size()));
  EXPECT_EQ(back, bytes);
}

TEST(Hex, MalformedTextIsRefused) {
  std::array<unsigned char, 2> out{};
  EXPECT_FALSE(from_hex("abc", out.data(), out.size()));    // odd length
  EXPECT_FALSE(from_hex("abcdef", out.data(), out.size())); // too long for 2 bytes
  EXPECT_FALSE(from_hex("zz00", out.data(), out.size()));   // not hex
  EXPECT_FALSE(from_hex("AB00", out.data(), out.size()));   // upper case is not what to_hex writes
}
