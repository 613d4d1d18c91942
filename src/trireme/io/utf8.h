// UTF-8 decoding and encoding, with one documented policy for invalid bytes.
//
// Note [invalid UTF-8]
// Decoding never fails. An ill-formed sequence becomes one U+FFFD per "maximal subpart"
// (the Unicode Standard's recommended practice, §3.9 / W3C encoding spec): a valid lead byte
// followed by the valid prefix of its continuation bytes is one U+FFFD; any other invalid
// byte is one U+FFFD on its own. Overlong forms, surrogates (U+D800..DFFF) and code points
// above U+10FFFF are invalid. Where exact bytes matter (the byte-level BPE tokenizer) the
// bytes are kept as they are instead, see tokenizer_bpe.h.
//
//   std::u32string cps = utf8_decode("床前明月光");          // 5 code points
//   std::string s = utf8_encode(cps);                         // the same bytes back
//   size_t bad = utf8_find_invalid("ok\xff");                 // 2
//   std::string shown = utf8_sanitize("ok\xff");              // "ok\uFFFD"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trireme::io {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// One decoding step at s[pos]: the code point (U+FFFD when invalid), how many bytes it used
// (always >= 1 so loops advance), and whether the sequence was valid.
struct Utf8Char {
  char32_t code_point;
  size_t length;
  bool valid;
};
Utf8Char utf8_next(std::string_view s, size_t pos);

std::u32string utf8_decode(std::string_view s);          // invalid bytes -> U+FFFD (see Note)
void utf8_append(std::string& out, char32_t code_point);  // throws on surrogates / > U+10FFFF
std::string utf8_encode(std::u32string_view code_points);

// Byte offset of the first invalid sequence, or std::string_view::npos when s is valid.
size_t utf8_find_invalid(std::string_view s);
inline bool utf8_is_valid(std::string_view s) { return utf8_find_invalid(s) == std::string_view::npos; }
// s with each invalid sequence replaced by U+FFFD; valid input comes back unchanged.
std::string utf8_sanitize(std::string_view s);

}  // namespace trireme::io
