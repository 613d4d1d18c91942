// Token shard reader and writer, and dataset preparation (format in token_shard.h).
#include "trireme/io/token_shard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <tuple>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

// The header and tokens are copied with memcpy, which is little-endian only on a
// little-endian host; every machine trireme targets (x86-64, aarch64 Linux) is one.
static_assert(std::endian::native == std::endian::little, "token shards assume a little-endian host");

namespace {

template <class T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

template <class T>
T get(std::string_view bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

}  // namespace

std::string serialize_token_shard(std::span<const int32_t> tokens, int64_t vocab_size) {
  TRIREME_CHECK(vocab_size > 0 && vocab_size <= (int64_t(1) << 32), "token shard: vocab size ", vocab_size,
                " is out of range");
  uint32_t width = vocab_size <= 65536 ? 2 : 4;
  std::string out;
  out.reserve(kTokenShardHeaderBytes + tokens.size() * width);
  out.append(kTokenShardMagic, 8);
  put<uint32_t>(out, kTokenShardVersion);
  put<uint32_t>(out, width);
  put<uint64_t>(out, tokens.size());
  put<uint64_t>(out, uint64_t(vocab_size));
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t t = tokens[i];
    TRIREME_CHECK(t >= 0 && t < vocab_size, "token shard: token ", t, " at position ", i,
                  " is outside the vocabulary [0, ", vocab_size, ")");
    if (width == 2) {
      put<uint16_t>(out, uint16_t(t));
    } else {
      put<uint32_t>(out, uint32_t(t));
    }
  }
  return out;
}

void write_token_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  const std::string bytes = serialize_token_shard(tokens, vocab_size);
  try {
    write_file_atomic(path, bytes);
  } catch (const Error& e) {
    TRIREME_FAIL("token shard '", path, "' not written: ", e.what());
  }
}

namespace {

struct ShardHeader {
  uint32_t width;
  uint64_t count, vocab;
};

// Checks the header (the first bytes of the file; fewer than 32 when the file is shorter)
// against the whole file's size, before any token is read.
ShardHeader check_header(std::string_view head, uint64_t file_size, const std::string& what) {
  // A short prefix of the magic is a truncated shard rather than a foreign file.
  size_t m = std::min<size_t>(head.size(), 8);
  TRIREME_CHECK(m > 0 && std::memcmp(head.data(), kTokenShardMagic, m) == 0, what, ": not a trireme token shard (",
                head.empty() ? "the file is empty" : "it does not start with \"TRIRTOK1\"", ")");
  TRIREME_CHECK(file_size >= kTokenShardHeaderBytes, what, ": truncated: expected a ", kTokenShardHeaderBytes,
                "-byte header, found ", file_size, " bytes");
  ShardHeader h;
  uint32_t version = get<uint32_t>(head, 8);
  TRIREME_CHECK(version == kTokenShardVersion, what, ": unsupported token shard version ", version,
                " (this build reads version ", kTokenShardVersion, ")");
  h.width = get<uint32_t>(head, 12);
  TRIREME_CHECK(h.width == 2 || h.width == 4, what, ": unsupported token dtype code ", h.width,
                " (expected 2 for u16 or 4 for u32)");
  h.count = get<uint64_t>(head, 16);
  h.vocab = get<uint64_t>(head, 24);
  TRIREME_CHECK(h.vocab > 0 && h.vocab <= (uint64_t(1) << 32), what, ": vocabulary size ", h.vocab, " is out of range");
  // Compare counts before multiplying, so a corrupt huge count cannot overflow the size check.
  uint64_t payload = file_size - kTokenShardHeaderBytes;
  TRIREME_CHECK(h.count <= payload / h.width, what, ": truncated: the header says ", h.count, " tokens, expected ",
                kTokenShardHeaderBytes, " + ", h.count, " x ", h.width, " bytes, found ", file_size, " bytes");
  uint64_t expected = kTokenShardHeaderBytes + h.count * h.width;
  TRIREME_CHECK(file_size == expected, what, ": ", file_size - expected,
                " trailing byte(s) after the tokens (expected ", expected, " bytes, found ", file_size, ")");
  return h;
}

TokenShard decode_tokens(const char* p, const ShardHeader& h, const std::string& what) {
  TokenShard shard;
  shard.vocab_size = int64_t(h.vocab);
  shard.dtype_bytes = h.width;
  shard.tokens.resize(h.count);
  for (uint64_t i = 0; i < h.count; ++i) {
    uint32_t t;
    if (h.width == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      t = v;
    } else {
      std::memcpy(&t, p + 4 * i, 4);
    }
    TRIREME_CHECK(t < h.vocab, what, ": token ", t, " at position ", i, " is not below the vocabulary size ", h.vocab);
    // Tokens are int32 in memory: a larger id would turn negative and index outside the embedding.
    TRIREME_CHECK(t <= uint32_t(INT32_MAX), what, ": token ", t, " at position ", i, " does not fit in an int32 token id");
    shard.tokens[i] = int32_t(t);
  }
  return shard;
}

}  // namespace

TokenShard parse_token_shard(std::string_view bytes, const std::string& what) {
  ShardHeader h = check_header(bytes.substr(0, kTokenShardHeaderBytes), bytes.size(), what);
  return decode_tokens(bytes.data() + kTokenShardHeaderBytes, h, what);
}

TokenShard read_token_shard(const std::string& path) {
  // The header is checked against the file size before the tokens are read, so a foreign or
  // truncated file is refused without reading (or allocating for) its contents.
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  TRIREME_CHECK(!ec, "token shard: cannot open '", path, "': ", ec.message());
  std::ifstream in(path, std::ios::binary);
  TRIREME_CHECK(in, "token shard: cannot open '", path, "'");
  std::string head(std::min<uint64_t>(size, kTokenShardHeaderBytes), '\0');
  in.read(head.data(), std::streamsize(head.size()));
  TRIREME_CHECK(in, path, ": error reading the header");
  ShardHeader h = check_header(head, size, path);
  std::string payload(size - kTokenShardHeaderBytes, '\0');
  in.read(payload.data(), std::streamsize(payload.size()));
  TRIREME_CHECK(in, path, ": error reading the tokens");
  return decode_tokens(payload.data(), h, path);
}

size_t split_point(std::string_view text, double val_fraction) {
  TRIREME_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "split_point: val_fraction must be in [0, 1), got ",
                val_fraction);
  if (val_fraction == 0.0 || text.empty()) return text.size();
  size_t target = size_t(double(text.size()) * (1.0 - val_fraction));
  // The boundary is just after the separator, so the validation part starts a document.
  auto nearest = [&](std::string_view sep) -> size_t {
    size_t after = text.find(sep, target);
    size_t before = target >= sep.size() ? text.rfind(sep, target - sep.size()) : std::string_view::npos;
    size_t a = after == std::string_view::npos ? std::string_view::npos : after + sep.size();
    size_t b = before == std::string_view::npos ? std::string_view::npos : before + sep.size();
    if (a >= text.size()) a = std::string_view::npos;  // a split that leaves validation empty
    if (b == 0) b = std::string_view::npos;            // or train empty
    if (a == std::string_view::npos) return b;
    if (b == std::string_view::npos) return a;
    return (a - target) < (target - b) ? a : b;
  };
  for (std::string_view sep : {std::string_view("\n\n"), std::string_view("\n")}) {
    size_t p = nearest(sep);
    if (p != std::string_view::npos) return p;
  }
  // No line breaks: back up to the start of the character at the target.
  size_t p = std::max<size_t>(target, 1);
  while (p < text.size() && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

PreparedDataset prepare_dataset(std::string_view text, const Tokenizer& tokenizer, const std::string& out_dir,
                                double val_fraction) {
  const size_t split = split_point(text, val_fraction);
  PreparedDataset d = prepare_dataset_split(text.substr(0, split), text.substr(split), tokenizer, out_dir);
  d.split_byte = split;
  return d;
}

namespace {

namespace fs = std::filesystem;

// Where a file of the prepared set is written before the set is committed: the name that
// write_file_atomic uses too, so remove_stale_temporaries finds either.
fs::path staging_path(const fs::path& final_path) {
  return final_path.parent_path() / ("." + final_path.filename().string() + ".tmp." + std::to_string(::getpid()));
}

// Removes the temporaries that a killed process left in `dir` (".train.bin.tmp.<pid>", the pid no
// longer running), so they do not pile up.
void remove_stale_temporaries(const fs::path& dir, std::initializer_list<std::string_view> names) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    for (std::string_view name : names) {
      const std::string prefix = "." + std::string(name) + ".tmp.";
      if (!f.starts_with(prefix)) continue;
      const long pid = std::strtol(f.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
    }
  }
}

// The three files of a prepared set, written beside their final names and then renamed together.
class StagedSet {
 public:
  ~StagedSet() {
    std::error_code ec;
    for (const auto& f : files_) fs::remove(staging_path(f), ec);  // whatever was not committed
  }
  explicit StagedSet(const WriteStepHook& after_step) : after_step_(after_step) {}
  void stage(const fs::path& final_path, std::string_view bytes) {
    files_.push_back(final_path);
    try {
      write_file(staging_path(final_path), bytes, /*durable=*/true);
    } catch (const Error& e) {
      TRIREME_FAIL("prepare: '", final_path.string(), "' not written (the folder keeps its previous files): ", e.what());
    }
    step("staged " + final_path.filename().string());
  }
  // tokenizer.json (the last file staged) goes first and comes back last, so a folder that holds a
  // tokenizer.json holds one preparation's complete set, even after a crash between the renames.
  void commit(const fs::path& dir) {
    std::error_code ec;
    fs::remove(files_.back(), ec);
    TRIREME_CHECK(!ec, "prepare: cannot remove the old '", files_.back().string(), "': ", ec.message());
    fsync_path(dir, /*directory=*/true);
    step("removed " + files_.back().filename().string());
    for (const auto& f : files_) {
      fs::rename(staging_path(f), f, ec);
      TRIREME_CHECK(!ec, "prepare: cannot rename '", staging_path(f).string(), "' to '", f.string(), "': ", ec.message());
      step("renamed " + f.filename().string());
    }
    files_.clear();
    fsync_path(dir, /*directory=*/true);
  }

 private:
  void step(const std::string& what) {
    if (after_step_) after_step_(what);
  }
  const WriteStepHook& after_step_;
  std::vector<fs::path> files_;
};

}  // namespace

PreparedDataset prepare_dataset_split(std::string_view train_text, std::string_view val_text,
                                      const Tokenizer& tokenizer, const std::string& out_dir,
                                      const WriteStepHook& after_step) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  TRIREME_CHECK(!ec, "prepare: cannot create '", out_dir, "': ", ec.message());
  PreparedDataset d;
  d.split_byte = train_text.size();
  d.train_path = (fs::path(out_dir) / "train.bin").string();
  d.val_path = (fs::path(out_dir) / "val.bin").string();
  d.tokenizer_path = (fs::path(out_dir) / "tokenizer.json").string();
  remove_stale_temporaries(out_dir, {"train.bin", "val.bin", "tokenizer.json"});
  // Everything is written to temporaries first: a full disk or any other failure leaves the
  // folder's previous set as it was.
  StagedSet staged(after_step);
  for (auto [text, path, count] : {std::tuple{train_text, &d.train_path, &d.train_tokens},
                                   std::tuple{val_text, &d.val_path, &d.val_tokens}}) {
    std::vector<int32_t> ids = tokenizer.encode(text);
    *count = int64_t(ids.size());
    staged.stage(*path, serialize_token_shard(ids, tokenizer.vocab_size()));
  }
  staged.stage(d.tokenizer_path, tokenizer.to_json().dump(1) + "\n");
  staged.commit(out_dir);
  return d;
}

}  // namespace trireme::io
