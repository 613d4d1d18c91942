// Character-level tokenizer (see tokenizer_char.h).
#include "trireme/io/tokenizer_char.h"

#include <algorithm>
#include <cstdio>

#include "trireme/core/error.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

CharTokenizer::CharTokenizer(std::u32string chars) : chars_(std::move(chars)) {
  for (size_t i = 0; i < chars_.size(); ++i) {
    char32_t c = chars_[i];
    TRIREME_CHECK(c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF), "char tokenizer: entry ", i + 1,
                  " is not a Unicode scalar value");
    TRIREME_CHECK(i == 0 || chars_[i - 1] < c, "char tokenizer: the vocabulary must be sorted by code "
                  "point without repeats (entry ", i + 1, ")");
    ids_.emplace(c, int32_t(i + 1));
  }
}

CharTokenizer CharTokenizer::train(std::string_view text) {
  std::u32string chars = utf8_decode(text);
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharTokenizer(std::move(chars));
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    Utf8Char c = utf8_next(text, pos);
    auto it = ids_.find(c.code_point);
    out.push_back(it == ids_.end() ? kUnk : it->second);
    pos += c.length;
  }
  return out;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 3);
  for (int32_t id : ids) {
    check_id(id);
    utf8_append(out, id == kUnk ? kReplacementChar : chars_[id - 1]);
  }
  return out;
}

char32_t CharTokenizer::code_point(int32_t id) const {
  check_id(id);
  TRIREME_CHECK(id != kUnk, "char tokenizer: <unk> has no code point");
  return chars_[id - 1];
}

std::string CharTokenizer::token_to_string(int32_t id) const {
  check_id(id);
  if (id == kUnk) return "<unk>";
  char32_t c = chars_[id - 1];
  switch (c) {
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    default: break;
  }
  if (c < 0x20 || c == 0x7F) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
    return buf;
  }
  std::string out;
  utf8_append(out, c);
  return out;
}

nlohmann::json CharTokenizer::to_json() const {
  nlohmann::json vocab = nlohmann::json::array();
  for (char32_t c : chars_) {
    std::string s;
    utf8_append(s, c);
    vocab.push_back(s);
  }
  return {{"type", "char"}, {"version", 1}, {"unk_id", kUnk}, {"vocab", vocab}};
}

CharTokenizer CharTokenizer::from_json(const nlohmann::json& j) {
  TRIREME_CHECK(j.value("type", "") == "char", "char tokenizer JSON: \"type\" is not \"char\"");
  // A float (1e80, or an integer too large for int64) would not convert to int defined.
  TRIREME_CHECK(!(j.contains("version") && j["version"].is_number_float()), "char tokenizer JSON: unsupported version ",
                j["version"].dump());
  TRIREME_CHECK(j.value("version", 0) == 1, "char tokenizer JSON: unsupported version ",
                j.contains("version") ? j["version"].dump() : "(missing)");
  TRIREME_CHECK(j.contains("vocab") && j["vocab"].is_array(), "char tokenizer JSON: \"vocab\" must be an array");
  std::u32string chars;
  for (size_t i = 0; i < j["vocab"].size(); ++i) {
    const auto& e = j["vocab"][i];
    TRIREME_CHECK(e.is_string(), "char tokenizer JSON: vocab entry ", i, " is not a string");
    std::u32string cps = utf8_decode(e.get<std::string>());
    TRIREME_CHECK(cps.size() == 1, "char tokenizer JSON: vocab entry ", i, " is not one character");
    chars.push_back(cps[0]);
  }
  return CharTokenizer(std::move(chars));
}

}  // namespace trireme::io
