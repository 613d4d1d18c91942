// Hex encoding of the store's binary values.
#include "trireme/dist/hex.h"

namespace trireme::dist {

std::string to_hex(const void* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<const unsigned char*>(data)[i];
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

bool from_hex(const std::string& s, void* data, size_t n) {
  if (s.size() != 2 * n) return false;
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const int hi = value(s[2 * i]), lo = value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace trireme::dist
