// Byte-level BPE: pre-tokenization, training with incremental pair counts, encoding.
#include "trireme/io/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <queue>

#include "trireme/core/error.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

namespace {

enum class CharClass { letter, digit, punct, space, newline, invalid };

bool is_unicode_punct(char32_t c) {
  return (c >= 0x2000 && c <= 0x206F) ||  // general punctuation (— … ‘ ’ “ ”)
         (c >= 0x3000 && c <= 0x303F) ||  // CJK symbols and punctuation (、。《》「」)
         c == 0x30FB ||                   // katakana middle dot ・
         (c >= 0xFE30 && c <= 0xFE4F) ||  // CJK compatibility forms
         (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||  // fullwidth ，：？
         (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65) || c == 0x00B7;
}

CharClass classify(const Utf8Char& c) {
  if (!c.valid) return CharClass::invalid;
  char32_t cp = c.code_point;
  if (cp == '\n' || cp == '\r') return CharClass::newline;
  if (cp == ' ' || cp == '\t' || cp == '\f' || cp == '\v' || cp == 0x3000) return CharClass::space;
  if ((cp >= '0' && cp <= '9') || (cp >= 0xFF10 && cp <= 0xFF19)) return CharClass::digit;
  if (cp < 0x80) {
    bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    return alpha ? CharClass::letter : CharClass::punct;
  }
  return is_unicode_punct(cp) ? CharClass::punct : CharClass::letter;
}

inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
inline int32_t key_left(uint64_t k) { return int32_t(k >> 32); }
inline int32_t key_right(uint64_t k) { return int32_t(k & 0xFFFFFFFFu); }

// Replaces every (a, b) in syms, left to right, by m; returns whether anything changed.
bool merge_pair(std::vector<int32_t>& syms, int32_t a, int32_t b, int32_t m) {
  size_t w = 0;
  bool changed = false;
  for (size_t r = 0; r < syms.size(); ++r) {
    if (r + 1 < syms.size() && syms[r] == a && syms[r + 1] == b) {
      syms[w++] = m;
      ++r;
      changed = true;
    } else {
      syms[w++] = syms[r];
    }
  }
  syms.resize(w);
  return changed;
}

}  // namespace

std::vector<std::string_view> bpe_pretokenize(std::string_view text) {
  std::vector<std::string_view> chunks;
  size_t start = 0, pos = 0;
  CharClass run = CharClass::invalid;
  bool open = false;
  auto cut = [&](size_t end) {
    if (end > start) chunks.push_back(text.substr(start, end - start));
    start = end;
  };
  while (pos < text.size()) {
    Utf8Char c = utf8_next(text, pos);
    CharClass cls = classify(c);
    bool joins = open && cls == run && cls != CharClass::invalid && pos + c.length - start <= kBpeMaxChunkBytes;
    if (!joins && open) {
      // A single trailing space of a space run moves over to prefix the next word-like run.
      bool wordlike = cls == CharClass::letter || cls == CharClass::digit || cls == CharClass::punct;
      if (run == CharClass::space && wordlike && text[pos - 1] == ' ') {
        cut(pos - 1);
      } else {
        cut(pos);
      }
    }
    if (!joins) run = cls;
    open = true;
    pos += c.length;
  }
  cut(text.size());
  return chunks;
}

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges) : merges_(std::move(merges)) {
  token_bytes_.reserve(256 + merges_.size());
  for (int i = 0; i < 256; ++i) token_bytes_.emplace_back(1, char(i));
  for (size_t i = 0; i < merges_.size(); ++i) {
    auto [a, b] = merges_[i];
    int32_t id = int32_t(256 + i);
    TRIREME_CHECK(a >= 0 && b >= 0 && a < id && b < id, "bpe tokenizer: merge ", i, " (", a, ", ", b,
                  ") uses an id that is not below its own id ", id);
    bool fresh = merge_rank_.emplace(pair_key(a, b), int32_t(i)).second;
    TRIREME_CHECK(fresh, "bpe tokenizer: merge ", i, " (", a, ", ", b, ") repeats an earlier merge");
    // Encoding never builds a token longer than a chunk, so a longer merge can only come from a
    // damaged file (and a chain of doubling merges would otherwise ask for gigabytes).
    TRIREME_CHECK(token_bytes_[a].size() + token_bytes_[b].size() <= kBpeMaxChunkBytes, "bpe tokenizer: merge ", i,
                  " (", a, ", ", b, ") makes a token of ", token_bytes_[a].size() + token_bytes_[b].size(),
                  " bytes, longer than a chunk (", kBpeMaxChunkBytes, " bytes)");
    token_bytes_.push_back(token_bytes_[a] + token_bytes_[b]);
  }
}

BpeTokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size) {
  TRIREME_CHECK(vocab_size >= 256 && vocab_size <= (int64_t(1) << 31) - 1,
                "bpe tokenizer: vocab size must be at least 256 (the byte tokens), got ", vocab_size);
  // Distinct chunks with their frequencies, in sorted order (the result does not depend on the
  // order, but sorting keeps every intermediate deterministic too).
  std::map<std::string_view, int64_t> chunk_counts;
  for (std::string_view c : bpe_pretokenize(text)) ++chunk_counts[c];
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(chunk_counts.size());
  for (auto& [chunk, count] : chunk_counts) {
    Word w{{}, count};
    for (unsigned char ch : chunk) w.syms.push_back(ch);
    words.push_back(std::move(w));
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold stale entries
  for (size_t wi = 0; wi < words.size(); ++wi) {
    const auto& s = words[wi].syms;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t k = pair_key(s[i], s[i + 1]);
      pair_count[k] += words[wi].count;
      auto& list = pair_words[k];
      if (list.empty() || list.back() != int32_t(wi)) list.push_back(int32_t(wi));
    }
  }
  // Max-heap on count, ties to the smaller key; entries whose count is out of date are skipped.
  using Entry = std::pair<int64_t, uint64_t>;
  auto less = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> heap(less);
  for (auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_map<uint64_t, int64_t> delta;
  while (256 + int64_t(merges.size()) < vocab_size && !heap.empty()) {
    auto [count, key] = heap.top();
    heap.pop();
    auto it = pair_count.find(key);
    if (it == pair_count.end() || it->second != count) continue;  // stale
    if (count < 2) break;
    int32_t a = key_left(key), b = key_right(key), m = int32_t(256 + merges.size());
    merges.emplace_back(a, b);

    std::vector<int32_t> affected = std::move(pair_words[key]);
    pair_words.erase(key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    delta.clear();
    for (int32_t wi : affected) {
      Word& w = words[wi];
      std::vector<int32_t> before = w.syms;
      if (!merge_pair(w.syms, a, b, m)) continue;  // a stale entry
      for (size_t i = 0; i + 1 < before.size(); ++i) delta[pair_key(before[i], before[i + 1])] -= w.count;
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        uint64_t k = pair_key(w.syms[i], w.syms[i + 1]);
        delta[k] += w.count;
        if (w.syms[i] == m || w.syms[i + 1] == m) {
          auto& list = pair_words[k];
          if (list.empty() || list.back() != wi) list.push_back(wi);
        }
      }
    }
    for (auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (c <= 0) {
        pair_count.erase(k);
      } else {
        heap.push({c, k});
      }
    }
  }
  return BpeTokenizer(std::move(merges));
}

void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  std::vector<int32_t> syms(chunk.begin(), chunk.end());
  for (auto& s : syms) s = static_cast<unsigned char>(s);
  while (syms.size() > 1) {
    // The lowest-ranked pair present is the next merge training applied to this chunk.
    int32_t best = INT32_MAX;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = merge_rank_.find(pair_key(syms[i], syms[i + 1]));
      if (it != merge_rank_.end() && it->second < best) best = it->second;
    }
    if (best == INT32_MAX) break;
    merge_pair(syms, merges_[best].first, merges_[best].second, 256 + best);
  }
  out.insert(out.end(), syms.begin(), syms.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 2);
  // Chunks repeat a lot in real text; a per-call cache keeps encode() const and thread-safe.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  for (std::string_view chunk : bpe_pretokenize(text)) {
    auto it = cache.find(chunk);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      encode_chunk(chunk, ids);
      it = cache.emplace(chunk, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    out += token_bytes_[id];
  }
  return out;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return token_bytes_[id];
}

std::string BpeTokenizer::token_to_string(int32_t id) const {
  const std::string& s = token_bytes(id);
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    Utf8Char c = utf8_next(s, pos);
    if (!c.valid) {
      for (size_t k = 0; k < c.length; ++k) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", unsigned(static_cast<unsigned char>(s[pos + k])));
        out += buf;
      }
    } else if (c.code_point == '\n') {
      out += "\\n";
    } else if (c.code_point == '\t') {
      out += "\\t";
    } else if (c.code_point == '\r') {
      out += "\\r";
    } else if (c.code_point < 0x20 || c.code_point == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c.code_point));
      out += buf;
    } else {
      out.append(s, pos, c.length);
    }
    pos += c.length;
  }
  return out;
}

nlohmann::json BpeTokenizer::to_json() const {
  nlohmann::json merges = nlohmann::json::array();
  for (auto [a, b] : merges_) merges.push_back({a, b});
  // Token strings are for people reading the file; loading rebuilds them from the merges.
  nlohmann::json tokens = nlohmann::json::array();
  for (size_t i = 256; i < token_bytes_.size(); ++i) tokens.push_back(token_to_string(int32_t(i)));
  return {{"type", "bpe"}, {"version", 1}, {"pretokenizer", "trireme-1"},
          {"max_chunk_bytes", kBpeMaxChunkBytes}, {"merges", merges}, {"merged_tokens", tokens}};
}

BpeTokenizer BpeTokenizer::from_json(const nlohmann::json& j) {
  TRIREME_CHECK(j.value("type", "") == "bpe", "bpe tokenizer JSON: \"type\" is not \"bpe\"");
  // A float (1e80, or an integer too large for int64) would not convert to int defined.
  TRIREME_CHECK(!(j.contains("version") && j["version"].is_number_float()), "bpe tokenizer JSON: unsupported version ",
                j["version"].dump());
  TRIREME_CHECK(j.value("version", 0) == 1, "bpe tokenizer JSON: unsupported version ",
                j.contains("version") ? j["version"].dump() : "(missing)");
  // Only an unsigned integer is read as one: a float outside uint64's range would not convert defined.
  const bool chunk_ok = j.contains("max_chunk_bytes") && j["max_chunk_bytes"].is_number_unsigned() &&
                        j["max_chunk_bytes"].get<uint64_t>() == kBpeMaxChunkBytes;
  TRIREME_CHECK(j.value("pretokenizer", "") == "trireme-1" && chunk_ok,
                "bpe tokenizer JSON: the file was made with a different pre-tokenizer (", j.value("pretokenizer", "?"),
                ", ", j.contains("max_chunk_bytes") ? j["max_chunk_bytes"].dump() : "(missing)",
                " bytes), this build uses trireme-1, ", kBpeMaxChunkBytes, " bytes");
  TRIREME_CHECK(j.contains("merges") && j["merges"].is_array(), "bpe tokenizer JSON: \"merges\" must be an array");
  std::vector<std::pair<int32_t, int32_t>> merges;
  for (size_t i = 0; i < j["merges"].size(); ++i) {
    const auto& m = j["merges"][i];
    TRIREME_CHECK(m.is_array() && m.size() == 2 && m[0].is_number_integer() && m[1].is_number_integer(),
                  "bpe tokenizer JSON: merge ", i, " is not a pair of integers");
    int64_t a = m[0], b = m[1];
    TRIREME_CHECK(a >= 0 && b >= 0 && a < INT32_MAX && b < INT32_MAX, "bpe tokenizer JSON: merge ", i,
                  " has an id out of range");
    merges.emplace_back(int32_t(a), int32_t(b));
  }
  return BpeTokenizer(std::move(merges));
}

}  // namespace trireme::io
