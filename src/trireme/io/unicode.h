// The Unicode properties and the normalization that Hugging Face tokenizers use: general
// categories L (letters) and N (numbers), the White_Space property (Oniguruma's \s), and NFC.
// Tables are Unicode 14.0 (scripts/gen_unicode_tables.py).
//
//   unicode_is_letter(U'中');                         // true
//   std::u32string s = unicode_nfc(U"e\u0301");       // U"\u00e9"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trireme::io {

bool unicode_is_letter(char32_t c);       // \p{L}
bool unicode_is_number(char32_t c);       // \p{N}
bool unicode_is_white_space(char32_t c);  // \s: the White_Space property
uint8_t unicode_combining_class(char32_t c);

// Canonical composition (Unicode Standard Annex #15): canonical decomposition, canonical
// ordering of combining marks, then composition of the primary composites (Hangul included).
std::u32string unicode_nfc(std::u32string_view s);

}  // namespace trireme::io
