// UTF-8 decoding with maximal-subpart replacement, and encoding (policy in utf8.h).
#include "trireme/io/utf8.h"

#include "trireme/core/error.h"

namespace trireme::io {

Utf8Char utf8_next(std::string_view s, size_t pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, true};
  // The lead byte fixes the length and the allowed range of the second byte; the tighter
  // second-byte ranges are what exclude overlongs, surrogates and values above U+10FFFF.
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kReplacementChar, 1, false};  // a stray continuation byte, C0, C1 or F5..FF
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {kReplacementChar, k, false};  // cut short at the end
    unsigned char b = byte(pos + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {kReplacementChar, k, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true};
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    Utf8Char c = utf8_next(s, pos);
    out.push_back(c.code_point);
    pos += c.length;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  TRIREME_CHECK(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF), "utf8_append: U+",
                std::hex, uint32_t(cp), " is not a Unicode scalar value");
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size() * 3);
  for (char32_t cp : code_points) utf8_append(out, cp);
  return out;
}

size_t utf8_find_invalid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {  // ASCII fast path
      ++pos;
      continue;
    }
    Utf8Char c = utf8_next(s, pos);
    if (!c.valid) return pos;
    pos += c.length;
  }
  return std::string_view::npos;
}

std::string utf8_sanitize(std::string_view s) {
  size_t bad = utf8_find_invalid(s);
  if (bad == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, bad));
  for (size_t pos = bad; pos < s.size();) {
    Utf8Char c = utf8_next(s, pos);
    if (c.valid) {
      out.append(s.substr(pos, c.length));
    } else {
      utf8_append(out, kReplacementChar);
    }
    pos += c.length;
  }
  return out;
}

}  // namespace trireme::io
