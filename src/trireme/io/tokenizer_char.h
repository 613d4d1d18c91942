// Character-level tokenizer: one token per Unicode code point seen in the training text.
//
// Ids: 0 is <unk>; 1.. are the training text's distinct code points in increasing code point
// order, so the same text always gives the same vocabulary.
//
// Round trips: decode(encode(x)) == x for any valid UTF-8 x whose characters are all in the
// vocabulary. A character outside it encodes to <unk>, which decodes to U+FFFD. Invalid UTF-8
// is first decoded with U+FFFD replacement (Note [invalid UTF-8] in utf8.h), so it encodes to
// the U+FFFD token if the vocabulary has one and to <unk> otherwise; it never throws.
//
//   CharTokenizer tok = CharTokenizer::train("床前明月光");   // vocab_size() == 6
//   tok.encode("明月") == std::vector<int32_t>{3, 4};         // ids follow code point order
#pragma once

#include <unordered_map>

#include "trireme/io/tokenizer.h"

namespace trireme::io {

class CharTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kUnk = 0;

  static CharTokenizer train(std::string_view text);
  static CharTokenizer from_json(const nlohmann::json& j);
  // `chars` must be distinct and sorted; they become ids 1..chars.size().
  explicit CharTokenizer(std::u32string chars);

  std::string type() const override { return "char"; }
  int64_t vocab_size() const override { return int64_t(chars_.size()) + 1; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_to_string(int32_t id) const override;
  nlohmann::json to_json() const override;

  char32_t code_point(int32_t id) const;  // the character of id >= 1

 private:
  std::u32string chars_;                          // id - 1 -> code point
  std::unordered_map<char32_t, int32_t> ids_;     // code point -> id
};

}  // namespace trireme::io
