// Hugging Face byte-level BPE tokenizer.json: parsing, encoding and decoding (see tokenizer_hf.h).
#include "trireme/io/tokenizer_hf.h"

#include <algorithm>
#include <fstream>
#include <queue>

#include "trireme/core/error.h"
#include "trireme/io/config.h"
#include "trireme/io/unicode.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

namespace {

using json = nlohmann::json;

// Refusals of what the file holds: configuration errors (the CLI exits with status 2).
template <class... Args>
[[noreturn]] void refuse(const std::string& what, Args&&... args) {
  throw ConfigError(str_cat(what, ": ", std::forward<Args>(args)..., " (supported: byte-level BPE tokenizers as GPT-2, "
                                                                    "Qwen2 and Llama 3 use, see docs/HUGGINGFACE.md)"));
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?"; }

bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the others to U+0100 on.
std::array<char32_t, 256> byte_level_chars() {
  std::array<char32_t, 256> out{};
  std::array<bool, 256> printable{};
  for (int b = 0; b < 256; ++b) printable[size_t(b)] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) out[size_t(b)] = printable[size_t(b)] ? char32_t(b) : next++;
  return out;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

bool HfTokenizer::is_hf_json(const json& j) {
  return j.is_object() && j.contains("model") && j["model"].is_object() && !j.contains("type");
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(str_cat("tokenizer '", path, "' cannot be opened"));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(str_cat("tokenizer '", path, "' is not valid JSON: ", e.what()));
  }
  return from_json(j, path);
}

HfTokenizer HfTokenizer::from_json(const json& j, const std::string& what) {
  if (!is_hf_json(j)) refuse(what, "not a Hugging Face tokenizer.json (no \"model\" object)");
  HfTokenizer t;
  t.json_ = j;
  try {
    const json& model = j["model"];
    if (type_of(model) != "BPE") refuse(what, "model type '", type_of(model), "' is not supported");
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
      refuse(what, "BPE dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
        refuse(what, "BPE ", key, " is not supported");
    if (flag(model, "byte_fallback")) refuse(what, "BPE byte_fallback is not supported");
    t.ignore_merges_ = flag(model, "ignore_merges");

    // Ids index tables of the vocabulary's size: a float (UB to convert when out of range) or a
    // huge id would make a few bytes of JSON ask for gigabytes.
    constexpr int64_t kMaxId = int64_t(1) << 24;
    const auto token_id = [&](const json& id, const std::string& token) {
      if (!id.is_number_integer()) refuse(what, "the id of '", token, "' is ", id.dump(), ", not an integer");
      if (id.is_number_unsigned() ? id.get<uint64_t>() >= uint64_t(kMaxId) : id.get<int64_t>() >= kMaxId)
        refuse(what, "the id of '", token, "' is ", id.dump(), ", over the limit ", kMaxId, " (vocabularies are smaller)");
      if (id.get<int64_t>() < 0) refuse(what, "vocabulary id ", id.dump(), " of '", token, "' is negative");
      return int32_t(id.get<int64_t>());
    };
    int32_t max_id = -1;
    for (const auto& [token, id] : model.at("vocab").items()) {
      const int32_t i = token_id(id, token);
      t.vocab_[token] = i;
      max_id = std::max(max_id, i);
    }
    std::vector<AddedToken> added;
    for (const json& a : j.value("added_tokens", json::array())) {
      AddedToken tok{token_id(a.at("id"), a.at("content").get<std::string>()), a.at("content").get<std::string>(), flag(a, "special"),
                     flag(a, "normalized")};
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (flag(a, key)) refuse(what, "added token '", tok.content, "' has ", key, " = true, which is not supported");
      if (tok.id < 0 || tok.content.empty()) refuse(what, "added token '", tok.content, "' has id ", tok.id);
      max_id = std::max(max_id, tok.id);
      added.push_back(std::move(tok));
    }
    t.vocab_size_ = int64_t(max_id) + 1;
    t.id_to_token_.assign(size_t(t.vocab_size_), "");
    t.special_.assign(size_t(t.vocab_size_), 0);
    for (const auto& [token, id] : t.vocab_) t.id_to_token_[size_t(id)] = token;
    for (const AddedToken& a : added) {
      t.id_to_token_[size_t(a.id)] = a.content;
      t.special_[size_t(a.id)] = a.special;
    }
    std::stable_sort(added.begin(), added.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
    t.added_ = std::move(added);

    int32_t rank = 0;
    for (const json& m : model.at("merges")) {
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) refuse(what, "merge '", s, "' is not two tokens separated by a space");
        left = s.substr(0, sp), right = s.substr(sp + 1);
      } else {
        left = m.at(0).get<std::string>(), right = m.at(1).get<std::string>();
      }
      auto l = t.vocab_.find(left), r = t.vocab_.find(right), merged = t.vocab_.find(left + right);
      if (l == t.vocab_.end() || r == t.vocab_.end() || merged == t.vocab_.end())
        refuse(what, "merge '", left, " ", right, "' (rank ", rank, ") names a token that is not in the vocabulary");
      t.merges_.emplace(pair_key(l->second, r->second), std::pair{rank, merged->second});
      ++rank;
    }

    const json& norm = j.value("normalizer", json());
    std::vector<json> norms;
    if (type_of(norm) == "Sequence") {
      for (const json& n : norm.at("normalizers")) norms.push_back(n);
    } else if (!norm.is_null()) {
      norms.push_back(norm);
    }
    for (const json& n : norms) {
      if (type_of(n) != "NFC") refuse(what, "normalizer '", type_of(n), "' is not supported");
      t.nfc_ = true;
    }

    const json& pre = j.value("pre_tokenizer", json());
    std::vector<json> pres;
    if (type_of(pre) == "Sequence") {
      for (const json& p : pre.at("pretokenizers")) pres.push_back(p);
    } else if (!pre.is_null()) {
      pres.push_back(pre);
    }
    for (const json& p : pres) {
      PreTokenizer step{};
      if (type_of(p) == "ByteLevel") {
        step.kind = PreTokenizer::byte_level;
        step.use_regex = p.value("use_regex", true);
        // Not checked against the library yet: refused rather than guessed.
        if (flag(p, "add_prefix_space")) refuse(what, "ByteLevel add_prefix_space = true is not supported");
      } else if (type_of(p) == "Split") {
        step.kind = PreTokenizer::split;
        const json& pattern = p.at("pattern");
        const std::string source = pattern.contains("Regex") ? pattern["Regex"].get<std::string>() : "";
        auto known = hf_split_pattern_of(source);
        if (!known) refuse(what, "Split pattern ", pattern.dump(), " is not one of the known split patterns");
        if (p.value("behavior", "") != "Isolated" || flag(p, "invert"))
          refuse(what, "Split behavior '", p.value("behavior", "?"), "'", flag(p, "invert") ? " inverted" : "",
                 " is not supported (only Isolated)");
        step.pattern = *known;
      } else {
        refuse(what, "pre_tokenizer '", type_of(p), "' is not supported");
      }
      if (!t.pre_.empty() && t.pre_.back().kind == PreTokenizer::byte_level)
        refuse(what, "a pre_tokenizer after ByteLevel is not supported");
      t.pre_.push_back(step);
    }
    if (t.pre_.empty() || t.pre_.back().kind != PreTokenizer::byte_level)
      refuse(what, "the pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");
    if (type_of(j.value("decoder", json())) != "ByteLevel")
      refuse(what, "decoder '", type_of(j.value("decoder", json())), "' is not supported (expected ByteLevel)");
    // encode() is add_special_tokens=False: a template's BOS/EOS are the caller's to add.
    const json& post = j.value("post_processor", json());
    std::vector<json> posts;
    if (type_of(post) == "Sequence") {
      for (const json& p : post.at("processors")) posts.push_back(p);
    } else if (!post.is_null()) {
      posts.push_back(post);
    }
    for (const json& p : posts)
      if (type_of(p) != "ByteLevel" && type_of(p) != "TemplateProcessing")
        refuse(what, "post_processor '", type_of(p), "' is not supported (expected null, ByteLevel or TemplateProcessing)");
  } catch (const json::exception& e) {
    refuse(what, "a field is missing or has the wrong type: ", e.what());
  }

  const std::array<char32_t, 256> chars = byte_level_chars();
  for (size_t b = 0; b < 256; ++b) {
    utf8_append(t.byte_char_[b], chars[b]);
    t.char_byte_[chars[b]] = uint8_t(b);
  }
  return t;
}

std::optional<int32_t> HfTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

bool HfTokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size_ && special_[size_t(id)]; }

std::string HfTokenizer::token_to_string(int32_t id) const {
  return id >= 0 && id < vocab_size_ ? id_to_token_[size_t(id)] : std::string();
}

void HfTokenizer::split_added(std::vector<Piece>& pieces, bool normalized) const {
  std::vector<Piece> out;
  for (Piece& p : pieces) {
    if (p.added_id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    const std::string& s = p.text;
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken& a : added_) {  // longest first
        if (a.normalized == normalized && s.compare(i, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      }
      if (!hit) {
        ++i;
        continue;
      }
      if (i > start) out.push_back({s.substr(start, i - start), -1});
      out.push_back({hit->content, hit->id});
      i += hit->content.size();
      start = i;
    }
    if (start < s.size()) out.push_back({s.substr(start), -1});
  }
  pieces = std::move(out);
}

std::string HfTokenizer::normalize(const std::string& s) const {
  return nfc_ ? utf8_encode(unicode_nfc(utf8_decode(s))) : s;
}

void HfTokenizer::bpe(const std::string& word, std::vector<int32_t>& out) const {
  std::string mapped;
  for (unsigned char b : word) mapped += byte_char_[b];
  if (ignore_merges_) {
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols as a linked list; merges from a min-heap of (rank, position): the lowest-ranked
  // adjacent pair first, the leftmost of equals, as the library's Word::merge_all does, in
  // O(n log n) for a word of n bytes (a long run of letters is one word).
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices, -1 at the ends
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (unsigned char b : word) {
    auto it = vocab_.find(byte_char_[b]);
    if (it == vocab_.end()) continue;  // a byte missing from the vocabulary is dropped, as the library does
    const int32_t i = int32_t(sym.size());
    sym.push_back({it->second, i - 1, -1, true});
    if (i > 0) sym[size_t(i - 1)].next = i;
  }
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || sym[size_t(pos)].next < 0) return;
    auto it = merges_.find(pair_key(sym[size_t(pos)].id, sym[size_t(sym[size_t(pos)].next)].id));
    if (it != merges_.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (int32_t i = 0; i + 1 < int32_t(sym.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[size_t(c.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[size_t(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.first != c.rank) continue;  // the pair changed since it was queued
    left.id = c.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (const Symbol& x : sym)
    if (x.alive) out.push_back(x.id);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<Piece> pieces{{utf8_sanitize(text), -1}};  // Note [invalid UTF-8 in Hugging Face tokenizers]
  split_added(pieces, /*normalized=*/false);
  for (Piece& p : pieces)
    if (p.added_id < 0) p.text = normalize(p.text);
  split_added(pieces, /*normalized=*/true);
  std::vector<int32_t> ids;
  for (const Piece& p : pieces) {
    if (p.added_id >= 0) {
      ids.push_back(p.added_id);
      continue;
    }
    std::vector<std::string> words{p.text};
    for (const PreTokenizer& step : pre_) {
      std::vector<std::string> next;
      for (std::string& w : words) {
        if (step.kind == PreTokenizer::byte_level && !step.use_regex) {
          next.push_back(std::move(w));
          continue;
        }
        const std::u32string cps = utf8_decode(w);
        for (auto [b, e] : hf_split(step.pattern, cps)) next.push_back(utf8_encode(std::u32string_view(cps).substr(b, e - b)));
      }
      words = std::move(next);
    }
    for (const std::string& w : words)
      if (!w.empty()) bpe(w, ids);
  }
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return utf8_sanitize(bytes_of(ids, skip_special_tokens));
}

std::string HfTokenizer::bytes_of(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_ || id_to_token_[size_t(id)].empty()) continue;
    if (skip_special_tokens && special_[size_t(id)]) continue;
    const std::string& token = id_to_token_[size_t(id)];
    // A token whose characters are all byte-level characters is those bytes; any other (an
    // added token in plain text) is its own UTF-8.
    std::string own;
    bool mapped = true;
    for (char32_t c : utf8_decode(token)) {
      auto it = char_byte_.find(c);
      if (it == char_byte_.end()) {
        mapped = false;
        break;
      }
      own.push_back(char(it->second));
    }
    bytes += mapped ? own : token;
  }
  return bytes;
}

}  // namespace trireme::io
