// UTF-8 decoding: valid text round-trips; invalid bytes follow the maximal-subpart policy.
#include <gtest/gtest.h>

#include "trireme/core/error.h"
#include "trireme/io/utf8.h"

namespace trireme::io {
namespace {

TEST(Utf8, ValidRoundTrip) {
  for (std::string s : {std::string(""), std::string("hello"), std::string("床前明月光，疑是地上霜。"),
                        std::string("emoji 😀👍🏽 and ß"), std::string("\x7f\xc2\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf")}) {
    EXPECT_TRUE(utf8_is_valid(s)) << s;
    EXPECT_EQ(utf8_encode(utf8_decode(s)), s);
    EXPECT_EQ(utf8_sanitize(s), s);
  }
  EXPECT_EQ(utf8_decode("明月").size(), 2u);
  EXPECT_EQ(utf8_decode("😀")[0], char32_t(0x1F600));
}

TEST(Utf8, InvalidBytesBecomeReplacement) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(utf8_sanitize("a\xff" "b"), "a" + r + "b");
  EXPECT_EQ(utf8_sanitize("\x80"), r);                      // stray continuation
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), r + r);              // overlong: C0 is never valid
  EXPECT_EQ(utf8_sanitize("\xE0\x80\x80"), r + r + r);      // overlong 3-byte form
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), r + r + r);      // a surrogate
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xE6\x98"), r);                  // a cut-off character: one maximal subpart
  EXPECT_EQ(utf8_sanitize("\xE6\x98" "x"), r + "x");
  EXPECT_EQ(utf8_find_invalid("ok\xff"), 2u);
  EXPECT_EQ(utf8_find_invalid("明\xE6"), 3u);
  EXPECT_TRUE(utf8_is_valid(utf8_sanitize("\xff\xfe\xE6\x98\xED\xA0\x80")));
}

TEST(Utf8, EncodeRefusesNonScalarValues) {
  std::string out;
  EXPECT_THROW(utf8_append(out, 0xD800), Error);
  EXPECT_THROW(utf8_append(out, 0x110000), Error);
}

}  // namespace
}  // namespace trireme::io
