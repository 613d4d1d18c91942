// The tokenizer interface, its JSON file format, and a factory for the two kinds
// (tokenizer_char.h: one token per code point; tokenizer_bpe.h: byte-level BPE).
//
// A tokenizer file is JSON with a "type" field ("char" or "bpe") that picks the class;
// the rest is the class's own state. A Hugging Face tokenizer.json (no "type", a "model"
// object) is read as io::HfTokenizer (tokenizer_hf.h).
//
//   std::unique_ptr<Tokenizer> tok = train_tokenizer("bpe", corpus_text, 2000);
//   std::vector<int32_t> ids = tok->encode("床前明月光");
//   std::string back = tok->decode(ids);        // == "床前明月光"
//   tok->save("out/tokenizer.json");
//   auto again = load_tokenizer("out/tokenizer.json");
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace trireme::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string type() const = 0;  // the JSON "type" field
  virtual int64_t vocab_size() const = 0;
  // Never throws on any byte string (invalid UTF-8 included; each class documents how).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws trireme::Error on an id outside [0, vocab_size).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // A printable form of one token for logs and debugging; always valid UTF-8.
  virtual std::string token_to_string(int32_t id) const = 0;
  virtual nlohmann::json to_json() const = 0;

  // to_json() written atomically (write_file_atomic): the old file or the new one, never part of
  // one; a failure throws naming the file and the system's reason.
  void save(const std::string& path) const;

 protected:
  void check_id(int32_t id) const;
};

// Builds the tokenizer that the JSON describes; errors name what is wrong.
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// Builds a tokenizer of `kind` ("char" or "bpe") from a training text. `bpe_vocab_size` is the
// target size for BPE (ignored for "char").
std::unique_ptr<Tokenizer> train_tokenizer(const std::string& kind, std::string_view text,
                                           int64_t bpe_vocab_size = 2000);

}  // namespace trireme::io
