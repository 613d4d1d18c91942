// Unicode categories and NFC over the generated tables (see unicode.h).
#include "trireme/io/unicode.h"

#include <algorithm>

#include "trireme/io/unicode_tables.h"

namespace trireme::io {

namespace ud = unicode_data;

namespace {

bool in_ranges(const ud::CodeRange* table, size_t n, char32_t c) {
  const ud::CodeRange* end = table + n;
  const ud::CodeRange* it = std::upper_bound(table, end, c, [](char32_t v, const ud::CodeRange& r) { return v < r.first; });
  return it != table && c <= (it - 1)->last;
}

// Hangul syllables compose and decompose by arithmetic (Unicode Standard §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const ud::Decomposition* end = ud::kDecompositions + ud::kDecompositionsSize;
  const ud::Decomposition* it = std::lower_bound(ud::kDecompositions, end, c,
                                                 [](const ud::Decomposition& d, char32_t v) { return d.code_point < v; });
  if (it == end || it->code_point != c) {
    out.push_back(c);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const ud::Composition* end = ud::kCompositions + ud::kCompositionsSize;
  const ud::Composition* it = std::lower_bound(ud::kCompositions, end, std::pair{a, b}, [](const ud::Composition& x, const std::pair<char32_t, char32_t>& v) {
    return x.first < v.first || (x.first == v.first && x.second < v.second);
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

bool unicode_is_letter(char32_t c) { return in_ranges(ud::kLetters, ud::kLettersSize, c); }
bool unicode_is_number(char32_t c) { return in_ranges(ud::kNumbers, ud::kNumbersSize, c); }

bool unicode_is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

uint8_t unicode_combining_class(char32_t c) {
  const ud::CombiningRange* end = ud::kCombining + ud::kCombiningSize;
  const ud::CombiningRange* it =
      std::upper_bound(ud::kCombining, end, c, [](char32_t v, const ud::CombiningRange& r) { return v < r.first; });
  return it != ud::kCombining && c <= (it - 1)->last ? (it - 1)->ccc : 0;
}

std::u32string unicode_nfc(std::u32string_view s) {
  // Below U+0300 nothing decomposes to anything but itself again after composition.
  if (std::all_of(s.begin(), s.end(), [](char32_t c) { return c < 0x300; })) return std::u32string(s);
  std::u32string d;
  d.reserve(s.size() + 8);
  for (char32_t c : s) decompose(c, d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (unicode_combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && unicode_combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + std::ptrdiff_t(i), d.begin() + std::ptrdiff_t(j),
                     [](char32_t a, char32_t b) { return unicode_combining_class(a) < unicode_combining_class(b); });
    i = j;
  }
  // Composition: each character joins the last starter unless a character between them blocks
  // it (has class 0, or a class not below its own).
  std::u32string out;
  out.reserve(d.size());
  size_t starter = std::u32string::npos;
  int last_ccc = -1;  // class of the last character appended after the starter (-1: none)
  for (char32_t c : d) {
    const int ccc = unicode_combining_class(c);
    if (starter != std::u32string::npos && (last_ccc == -1 || (last_ccc != 0 && last_ccc < ccc))) {
      if (char32_t composite = compose(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace trireme::io
