// A Hugging Face `tokenizer.json` of the byte-level BPE kind (GPT-2, Qwen2, Llama 3), encoding
// and decoding token for token as the `tokenizers` library does (Tokenizer.encode(text,
// add_special_tokens=False) and Tokenizer.decode(ids, skip_special_tokens)).
//
// What is read (anything else is refused with io::ConfigError naming the field and value):
//   added_tokens     split out of the text first, leftmost and longest first: those with
//                    "normalized": false on the raw text, the others after normalization
//                    (lstrip, rstrip and single_word must be false)
//   normalizer       null or NFC (also inside a Sequence)
//   pre_tokenizer    ByteLevel (use_regex: GPT-2's split pattern; no add_prefix_space), Split with an Isolated known
//                    pattern (io/hf_split.h: GPT-2's, Qwen2's, Llama 3's) or a Sequence of these
//   model            BPE: vocab, merges ("a b" or ["a", "b"]) applied by rank, ignore_merges; no
//                    dropout, byte_fallback, unk_token use, or subword prefix/suffix
//   decoder          ByteLevel
//   post_processor   null, ByteLevel or TemplateProcessing: encode() is add_special_tokens=False,
//                    so a template's BOS/EOS are not added (the caller adds them by token_id)
//
// Note [invalid UTF-8 in Hugging Face tokenizers]
// The `tokenizers` library takes only valid Unicode strings, so a Python caller turns bytes into
// text with bytes.decode("utf-8", errors="replace"): one U+FFFD per maximal ill-formed subpart.
// encode() does the same (io/utf8.h, Note [invalid UTF-8]), so invalid input gives the ids
// Python gets for it. decode() returns what the library returns: the tokens' bytes with ill-formed
// parts replaced the same way (a prefix of ids that cuts a character ends in U+FFFD).
//
//   HfTokenizer tok = HfTokenizer::load("Qwen2-0.5B/tokenizer.json");
//   std::vector<int32_t> ids = tok.encode("<|im_start|>user\n床前明月光<|im_end|>");
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
#pragma once

#include <array>
#include <map>
#include <optional>
#include <unordered_map>

#include "trireme/io/hf_split.h"
#include "trireme/io/tokenizer.h"

namespace trireme::io {

class HfTokenizer final : public Tokenizer {
 public:
  // `what` names the source in errors (the file).
  static HfTokenizer from_json(const nlohmann::json& j, const std::string& what = "tokenizer.json");
  static HfTokenizer load(const std::string& path);
  // True for JSON that looks like a Hugging Face tokenizer.json (a "model" object and no "type").
  static bool is_hf_json(const nlohmann::json& j);

  std::string type() const override { return "hf"; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // The tokens' exact bytes, as the Tokenizer interface asks (invalid UTF-8 only where the ids
  // cut a character: streaming callers wait for the rest); ids with no token are skipped, as the
  // library does.
  std::string decode(std::span<const int32_t> ids) const override { return bytes_of(ids, false); }
  // What the library's decode returns: the bytes with ill-formed parts replaced by U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // The token as tokenizer.json writes it (byte-level form, e.g. "Ġthe"); "" for an unused id.
  std::string token_to_string(int32_t id) const override;
  nlohmann::json to_json() const override { return json_; }  // the tokenizer.json read

  std::optional<int32_t> token_id(std::string_view token) const;  // added tokens, then the vocabulary
  bool is_special(int32_t id) const;

 private:
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, normalized;
  };
  struct PreTokenizer {
    enum Kind { split, byte_level } kind;
    HfSplitPattern pattern = HfSplitPattern::gpt2;  // split; byte_level with use_regex
    bool use_regex = false;
  };
  struct Piece {
    std::string text;
    int32_t added_id = -1;  // >= 0: an added token, not tokenized further
  };

  HfTokenizer() = default;
  std::string bytes_of(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // Splits the pieces without an id at the added tokens of the given kind (normalized or not).
  void split_added(std::vector<Piece>& pieces, bool normalized) const;
  std::string normalize(const std::string& s) const;
  // One pre-tokenized word (byte-level mapped), appended as BPE ids.
  void bpe(const std::string& word, std::vector<int32_t>& out) const;

  nlohmann::json json_;
  std::vector<AddedToken> added_;         // longest content first, for leftmost-longest matching
  bool nfc_ = false;
  std::vector<PreTokenizer> pre_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // vocabulary and added tokens, "" where unused
  std::vector<char> special_;             // per id
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left << 32 | right) -> (rank, id)
  bool ignore_merges_ = false;
  std::array<std::string, 256> byte_char_;      // byte -> its byte-level character (UTF-8)
  std::map<char32_t, uint8_t> char_byte_;       // the reverse
  int64_t vocab_size_ = 0;
};

}  // namespace trireme::io
