// Token shards: a tokenized corpus on disk, and `prepare_dataset` that writes the train and
// validation shards plus the tokenizer.
//
// Format (all integers little-endian), a 32-byte header then the tokens:
//   offset  0  8 bytes  magic "TRIRTOK1"
//   offset  8  u32      format version (1)
//   offset 12  u32      token dtype: 2 = u16, 4 = u32 (the byte width; u16 when vocab <= 65536)
//   offset 16  u64      token count N
//   offset 24  u64      vocabulary size V (every token is < V)
//   offset 32  N tokens of the dtype's width
// The reader checks all of it against the file size, so a truncated copy, a file with bytes
// appended, or a file of another kind is refused with an error naming the file.
//
//   write_token_shard("train.bin", ids, tok.vocab_size());
//   TokenShard s = read_token_shard("train.bin");   // s.tokens, s.vocab_size
//   PreparedDataset d = prepare_dataset(corpus.text(), tok, "out/data", 0.1);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trireme/io/tokenizer.h"

namespace trireme::io {

inline constexpr char kTokenShardMagic[8] = {'T', 'R', 'I', 'R', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr size_t kTokenShardHeaderBytes = 32;

struct TokenShard {
  std::vector<int32_t> tokens;
  int64_t vocab_size = 0;
  uint32_t dtype_bytes = 0;  // 2 or 4, as stored
};

// Bytes of a shard; u16 when vocab_size <= 65536, else u32. Throws if a token is out of
// [0, vocab_size).
std::string serialize_token_shard(std::span<const int32_t> tokens, int64_t vocab_size);
// Writes through a temporary file, fsync and a rename (write_file_atomic), so a crash never leaves
// a half-written shard; a failure throws naming the shard and the system's reason.
void write_token_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size);

// Errors (each prefixed by `what`, the file name for read_token_shard): "not a trireme token
// shard" (wrong magic), unsupported version, unsupported dtype, "truncated: expected N bytes,
// found M", "K trailing byte(s) after the tokens", a token >= the vocabulary size.
TokenShard parse_token_shard(std::string_view bytes, const std::string& what = "buffer");
TokenShard read_token_shard(const std::string& path);

struct PreparedDataset {
  std::string train_path, val_path, tokenizer_path;
  size_t split_byte = 0;  // the text before this byte is train, the rest validation
  int64_t train_tokens = 0, val_tokens = 0;
  std::string split;  // how validation was chosen, for the log (prepare_from_config)
};

// Where the text is split so that about `val_fraction` of its bytes are validation: the blank
// line ("\n\n", a document or poem boundary) nearest to that point, else the nearest line
// break, else the nearest character boundary. Validation is the tail. Deterministic.
size_t split_point(std::string_view text, double val_fraction);

// Tokenizes text[0, split) and text[split, end) separately (so no token spans the split) and
// writes out_dir/train.bin, out_dir/val.bin and out_dir/tokenizer.json (creating out_dir). All
// three are written to temporaries first, so a failed write (a full disk) leaves the old set as
// it was, naming the file and the reason; then tokenizer.json is removed and the three renamed
// into place, tokenizer.json last: after a crash the folder holds one complete set, or no
// tokenizer.json (which load_prepared_dataset refuses), and never a partial file.
PreparedDataset prepare_dataset(std::string_view text, const Tokenizer& tokenizer,
                                const std::string& out_dir, double val_fraction);
// The same with the split given: train and validation texts tokenized and written separately.
// `after_step`, when given, is called after each step of the write ("staged train.bin", "removed
// tokenizer.json", "renamed val.bin", ...): crash tests stop the process there.
using WriteStepHook = std::function<void(const std::string& step)>;
PreparedDataset prepare_dataset_split(std::string_view train_text, std::string_view val_text,
                                      const Tokenizer& tokenizer, const std::string& out_dir,
                                      const WriteStepHook& after_step = {});

}  // namespace trireme::io
