// Byte-level BPE tokenizer: 256 byte tokens plus merges learned from a training text.
//
// Training (Sennrich et al. 2016, on bytes as in GPT-2): the text is cut into chunks
// (bpe_pretokenize below), and merges are learned inside chunks only. Each step merges the
// most frequent adjacent pair; ties go to the pair with the smaller (left id, right id), so
// training is a pure function of (text, vocab size). Pair counts are updated incrementally:
// a merge only revisits the distinct chunks that contain the pair. Training stops early when
// no pair occurs twice, so vocab_size() can be below the target.
//
// Encoding cuts the text into the same chunks and applies the merges in rank order.
// Round trips: decode(encode(x)) == x for every byte string x, valid UTF-8 or not: invalid
// bytes are simply byte tokens (byte fallback). decode() returns the exact bytes, which are
// invalid UTF-8 only if the ids cut through a character (e.g. a sampled prefix); pass the
// result through utf8_sanitize() before printing it if that can happen.
//
//   BpeTokenizer tok = BpeTokenizer::train(corpus.text(), 2000);
//   std::vector<int32_t> ids = tok.encode("白日依山尽");  // a few ids, not 15 bytes
//   tok.token_to_string(ids[0]);                          // e.g. "白日"
#pragma once

#include <unordered_map>
#include <utility>

#include "trireme/io/tokenizer.h"

namespace trireme::io {

// The chunking shared by training and encoding ("trireme-1" in the JSON): runs of letters
// (any non-ASCII code point that is not punctuation counts as a letter, so CJK runs stay
// together), of digits, of punctuation, of spaces, of newlines; a single space before a
// letter/digit/punctuation run joins that run (" the"); each invalid UTF-8 sequence is a chunk
// of its own; a chunk is cut after kBpeMaxChunkBytes (at a character boundary).
inline constexpr size_t kBpeMaxChunkBytes = 128;
std::vector<std::string_view> bpe_pretokenize(std::string_view text);

class BpeTokenizer final : public Tokenizer {
 public:
  static BpeTokenizer train(std::string_view text, int64_t vocab_size);
  static BpeTokenizer from_json(const nlohmann::json& j);
  // merges[i] = (left, right) makes token 256 + i; both must be ids below 256 + i.
  explicit BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges);

  std::string type() const override { return "bpe"; }
  int64_t vocab_size() const override { return int64_t(token_bytes_.size()); }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  // The token's bytes, with invalid UTF-8 bytes shown as <0xAB> and \n, \t, \r escaped.
  std::string token_to_string(int32_t id) const override;
  nlohmann::json to_json() const override;

  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  const std::string& token_bytes(int32_t id) const;

 private:
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> token_bytes_;               // id -> bytes
  std::unordered_map<uint64_t, int32_t> merge_rank_;   // (left << 32 | right) -> merge index
};

}  // namespace trireme::io
