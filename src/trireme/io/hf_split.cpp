// Hand-written matchers of the byte-level tokenizers' split patterns (see hf_split.h).
#include "trireme/io/hf_split.h"

#include "trireme/io/unicode.h"

namespace trireme::io {

namespace {

constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_l(char32_t c) { return unicode_is_letter(c); }
bool is_n(char32_t c) { return unicode_is_number(c); }
bool is_s(char32_t c) { return unicode_is_white_space(c); }
bool is_newline(char32_t c) { return c == U'\r' || c == U'\n'; }
bool is_other(char32_t c) { return !is_s(c) && !is_l(c) && !is_n(c); }  // [^\s\p{L}\p{N}]

// Under (?i), a letter of the contractions matches its other case; 's' also matches U+017F
// (LATIN SMALL LETTER LONG S), which case-folds to 's'.
bool letter_is(char32_t c, char32_t lower, bool fold) {
  if (c == lower) return true;
  if (!fold) return false;
  return c == lower - 32 || (lower == U's' && c == 0x17F);
}

// 's|'t|'re|'ve|'m|'ll|'d at i: its length, or 0.
size_t contraction(std::u32string_view t, size_t i, bool fold) {
  if (t[i] != U'\'' || i + 1 >= t.size()) return 0;
  const char32_t a = t[i + 1];
  for (char32_t one : {U's', U't', U'm', U'd'})
    if (letter_is(a, one, fold)) return 2;
  if (i + 2 >= t.size()) return 0;
  const char32_t b = t[i + 2];
  if ((letter_is(a, U'r', fold) && letter_is(b, U'e', fold)) || (letter_is(a, U'v', fold) && letter_is(b, U'e', fold)) ||
      (letter_is(a, U'l', fold) && letter_is(b, U'l', fold)))
    return 3;
  return 0;
}

size_t run(std::u32string_view t, size_t i, bool (*pred)(char32_t)) {
  size_t j = i;
  while (j < t.size() && pred(t[j])) ++j;
  return j - i;
}

// \s+(?!\S) then \s+ at i (t[i] is white space): the run, less its last character when a
// non-space follows and the run is longer than one.
size_t trailing_space(std::u32string_view t, size_t i) {
  const size_t n = run(t, i, is_s);
  return (i + n < t.size() && n > 1) ? n - 1 : n;
}

size_t match_gpt2(std::u32string_view t, size_t i) {
  if (size_t n = contraction(t, i, false)) return n;
  const size_t sp = (t[i] == U' ' && i + 1 < t.size()) ? 1 : 0;  // ' ?' before a run
  for (auto pred : {is_l, is_n, is_other}) {
    if (sp && pred(t[i + 1])) return 1 + run(t, i + 1, pred);
    if (pred(t[i])) return run(t, i, pred);
  }
  return trailing_space(t, i);  // t[i] is white space: every other class was tried
}

size_t match_qwen2(std::u32string_view t, size_t i, size_t max_digits) {
  if (size_t n = contraction(t, i, true)) return n;
  const char32_t c = t[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_newline(c) && !is_l(c) && !is_n(c) && i + 1 < t.size() && is_l(t[i + 1])) return 1 + run(t, i + 1, is_l);
  if (is_l(c)) return run(t, i, is_l);
  if (is_n(c)) return std::min(run(t, i, is_n), max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t sp = (c == U' ' && i + 1 < t.size() && is_other(t[i + 1])) ? 1 : 0;
  if (sp || is_other(c)) {
    size_t n = sp + run(t, i + sp, is_other);
    return n + run(t, i + n, is_newline);
  }
  // \s*[\r\n]+: the white-space run up to its last \r or \n.
  const size_t n = run(t, i, is_s);
  for (size_t k = n; k > 0; --k)
    if (is_newline(t[i + k - 1])) return k;
  return trailing_space(t, i);
}

}  // namespace

std::optional<HfSplitPattern> hf_split_pattern_of(std::string_view regex) {
  if (regex == kGpt2) return HfSplitPattern::gpt2;
  if (regex == kQwen2) return HfSplitPattern::qwen2;
  if (regex == kLlama3) return HfSplitPattern::llama3;
  return std::nullopt;
}

const char* hf_split_pattern_source(HfSplitPattern p) {
  switch (p) {
    case HfSplitPattern::gpt2: return kGpt2;
    case HfSplitPattern::qwen2: return kQwen2;
    case HfSplitPattern::llama3: return kLlama3;
  }
  return "";
}

std::vector<std::pair<size_t, size_t>> hf_split(HfSplitPattern p, std::u32string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = p == HfSplitPattern::gpt2 ? match_gpt2(text, i) : match_qwen2(text, i, p == HfSplitPattern::qwen2 ? 1 : 3);
    out.emplace_back(i, i + n);
    i += n;
  }
  return out;
}

}  // namespace trireme::io
