// Corpus loading and the cleaning of the fortunes-zh poem files (see corpus.h).
#include "trireme/io/corpus.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trireme/core/error.h"
#include "trireme/io/token_shard.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

namespace fs = std::filesystem;

namespace {

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIREME_CHECK(in, "corpus: cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  TRIREME_CHECK(!in.bad(), "corpus: error reading '", path, "'");
  return ss.str();
}

std::string_view trim(std::string_view s) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// SplitMix64: a fixed generator, so a seed picks the same documents with every standard library.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string percent(size_t part, size_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole ? 100.0 * double(part) / double(whole) : 0.0);
  return buf;
}

}  // namespace

std::string Corpus::text() const {
  std::string out;
  out.reserve(bytes());
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i) out += "\n\n";
    out += documents[i].text;
  }
  if (!documents.empty()) out += '\n';
  return out;
}

size_t Corpus::bytes() const {
  size_t n = 0;
  for (const auto& d : documents) n += d.text.size();
  return documents.empty() ? 0 : n + 2 * (documents.size() - 1) + 1;
}

std::string default_fortunes_dir() {
  const char* env = std::getenv("TRIREME_FORTUNES_DIR");
  return env && *env ? std::string(env) : std::string("/usr/share/games/fortunes");
}

std::string strip_ansi_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\x1b') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '[') {
      // CSI: ESC [ parameter bytes (0x30-0x3F)* intermediate bytes (0x20-0x2F)* final (0x40-0x7E).
      size_t j = i + 2;
      while (j < s.size() && s[j] >= 0x30 && s[j] <= 0x3F) ++j;
      while (j < s.size() && s[j] >= 0x20 && s[j] <= 0x2F) ++j;
      if (j < s.size() && s[j] >= 0x40 && s[j] <= 0x7E) ++j;
      i = j - 1;
    } else if (i + 1 < s.size()) {
      ++i;  // a two-byte escape (ESC followed by one byte)
    }
  }
  return out;
}

std::vector<Document> parse_fortune_file(std::string_view raw, const std::string& source) {
  std::string clean = strip_ansi_escapes(raw);
  std::vector<Document> docs;
  std::string current;
  auto finish = [&] {
    if (!current.empty()) docs.push_back({source, std::move(current)});
    current.clear();
  };
  std::string_view rest(clean);
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = trim(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line == "%") {
      finish();
    } else if (!line.empty()) {
      if (!current.empty()) current += '\n';
      current += line;
    }
  }
  finish();
  return docs;
}

void check_utf8(std::string_view text, const std::string& what) {
  size_t bad = utf8_find_invalid(text);
  if (bad == std::string_view::npos) return;
  size_t line = 1 + std::count(text.begin(), text.begin() + bad, '\n');
  TRIREME_FAIL(what, ": invalid UTF-8 at byte ", bad, " (line ", line, ", byte 0x", std::hex,
               int(static_cast<unsigned char>(text[bad])), std::dec,
               "); the corpus must be UTF-8 text (convert other encodings with iconv first)");
}

std::vector<size_t> choose_validation_documents(size_t n_documents, double val_fraction, uint64_t seed) {
  TRIREME_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "validation split: val_fraction must be in [0, 1), got ",
                val_fraction);
  if (n_documents < 2 || val_fraction == 0.0) return {};
  const size_t k = std::clamp<size_t>(size_t(std::llround(val_fraction * double(n_documents))), 1, n_documents - 1);
  std::vector<size_t> chosen;
  chosen.reserve(k);
  uint64_t state = seed;
  for (size_t i = 0; i < k; ++i) {
    // Stretch i is [i*n/k, (i+1)*n/k): k equal consecutive stretches covering every document.
    const size_t lo = size_t((unsigned __int128)i * n_documents / k);
    const size_t hi = size_t((unsigned __int128)(i + 1) * n_documents / k);
    chosen.push_back(lo + size_t(splitmix64(state) % (hi - lo)));
  }
  return chosen;
}

CorpusSplit split_corpus(const Corpus& corpus, double val_fraction, uint64_t seed) {
  CorpusSplit s;
  const size_t n = corpus.documents.size();
  if (n == 1 && val_fraction > 0.0) {
    const Document& d = corpus.documents[0];
    const std::string text = d.text + "\n";  // as Corpus::text() ends it
    const size_t cut = split_point(text, val_fraction);
    s.train_text = text.substr(0, cut);
    s.val_text = text.substr(cut);
    s.inside_document = true;
    s.description = str_cat("validation: the last ", percent(s.val_text.size(), text.size()), " of the only document, '",
                            d.source, "' (a one-document corpus is split inside the document, at a line break ",
                            "where there is one; give several files to validate on whole documents)");
    return s;
  }
  s.val_documents = choose_validation_documents(n, val_fraction, seed);
  // Both texts joined as Corpus::text() joins documents, without copying the documents first.
  auto append = [](std::string& out, const std::string& doc) {
    if (!out.empty()) out += '\n';  // a blank line between documents
    out += doc;
    out += '\n';
  };
  size_t next_val = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool is_val = next_val < s.val_documents.size() && s.val_documents[next_val] == i;
    next_val += is_val;
    append(is_val ? s.val_text : s.train_text, corpus.documents[i].text);
  }
  if (s.val_documents.empty()) {
    s.description = "validation: none (val_fraction = 0)";
  } else {
    const size_t k = s.val_documents.size();
    s.description = str_cat("validation: ", k, " of ", n, " documents (", percent(s.val_text.size(),
                            s.train_text.size() + s.val_text.size()), " of the text), one drawn with seed ", seed,
                            " from each of ", k, " equal stretches of the corpus");
  }
  return s;
}

Corpus load_poem_corpus(const std::string& fortunes_dir) {
  Corpus corpus;
  for (const char* name : {"tang300", "song100"}) {
    std::string path = (fs::path(fortunes_dir) / name).string();
    TRIREME_CHECK(fs::is_regular_file(path), "default corpus: '", path,
                  "' not found (install Debian's fortunes-zh package, set TRIREME_FORTUNES_DIR, "
                  "or set data.corpus to your own text files)");
    std::string raw = read_file_bytes(path);
    check_utf8(raw, path);
    for (auto& d : parse_fortune_file(raw, path)) corpus.documents.push_back(std::move(d));
  }
  return corpus;
}

Corpus load_text_corpus(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    TRIREME_CHECK(fs::exists(p), "corpus: '", p, "' does not exist");
    if (fs::is_directory(p)) {
      std::vector<std::string> found;
      auto it = fs::recursive_directory_iterator(p);
      for (auto end = fs::recursive_directory_iterator(); it != end; ++it) {
        std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().generic_string());
      }
      std::sort(found.begin(), found.end());
      TRIREME_CHECK(!found.empty(), "corpus: folder '", p, "' holds no files");
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(p);
    }
  }
  Corpus corpus;
  for (const auto& f : files) {
    std::string text = read_file_bytes(f);
    check_utf8(text, f);
    if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!text.empty()) corpus.documents.push_back({f, std::move(text)});
  }
  TRIREME_CHECK(!corpus.documents.empty(), "corpus: no text found in the given paths");
  return corpus;
}

Corpus load_corpus(const std::vector<std::string>& specs) {
  TRIREME_CHECK(!specs.empty(), "corpus: no corpus given");
  Corpus corpus;
  std::vector<std::string> paths;
  auto flush_paths = [&] {
    if (paths.empty()) return;
    Corpus c = load_text_corpus(paths);
    for (auto& d : c.documents) corpus.documents.push_back(std::move(d));
    paths.clear();
  };
  for (const auto& s : specs) {
    if (s == "tang") {
      flush_paths();
      for (auto& d : load_poem_corpus().documents) corpus.documents.push_back(std::move(d));
    } else {
      paths.push_back(s);
    }
  }
  flush_paths();
  return corpus;
}

}  // namespace trireme::io
