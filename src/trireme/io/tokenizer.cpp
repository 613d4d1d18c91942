// Tokenizer file I/O and the factory that picks a class by the JSON "type" field.
#include "trireme/io/tokenizer.h"

#include <fstream>
#include <sstream>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"
#include "trireme/io/tokenizer_bpe.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/io/tokenizer_hf.h"

namespace trireme::io {

void Tokenizer::check_id(int32_t id) const {
  TRIREME_CHECK(id >= 0 && id < vocab_size(), type(), " tokenizer: token id ", id,
                " is outside the vocabulary [0, ", vocab_size(), ")");
}

void Tokenizer::save(const std::string& path) const {
  try {
    write_file_atomic(path, to_json().dump(1) + "\n");
  } catch (const Error& e) {
    TRIREME_FAIL("tokenizer '", path, "' not written: ", e.what());
  }
}

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& j) {
  if (HfTokenizer::is_hf_json(j)) return std::make_unique<HfTokenizer>(HfTokenizer::from_json(j));
  TRIREME_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
                "tokenizer JSON: expected an object with a string \"type\" field");
  std::string type = j["type"];
  // A field of the wrong JSON type ("version": "1") is a malformed tokenizer like any other.
  try {
    if (type == "char") return std::make_unique<CharTokenizer>(CharTokenizer::from_json(j));
    if (type == "bpe") return std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(j));
  } catch (const nlohmann::json::exception& e) {
    TRIREME_FAIL("tokenizer JSON (", type, "): a field has the wrong type: ", e.what());
  }
  TRIREME_FAIL("tokenizer JSON: unknown type '", type, "' (expected \"char\" or \"bpe\")");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIREME_CHECK(in, "tokenizer: cannot open '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TRIREME_FAIL("tokenizer: '", path, "' is not valid JSON: ", e.what());
  }
  try {
    return tokenizer_from_json(j);
  } catch (const Error& e) {
    TRIREME_FAIL(path, ": ", e.what());
  }
}

std::unique_ptr<Tokenizer> train_tokenizer(const std::string& kind, std::string_view text,
                                           int64_t bpe_vocab_size) {
  if (kind == "char") return std::make_unique<CharTokenizer>(CharTokenizer::train(text));
  if (kind == "bpe") return std::make_unique<BpeTokenizer>(BpeTokenizer::train(text, bpe_vocab_size));
  TRIREME_FAIL("tokenizer: unknown kind '", kind, "' (expected \"char\" or \"bpe\")");
}

}  // namespace trireme::io
