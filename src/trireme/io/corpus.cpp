// Corpus loading and the cleaning of the fortunes-zh poem files (see corpus.h).
#include "trireme/io/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trireme/core/error.h"
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
