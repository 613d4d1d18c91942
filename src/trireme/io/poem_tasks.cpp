// The Chinese fine-tuning tasks from the poems (see poem_tasks.h).
#include "trireme/io/poem_tasks.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"

namespace fs = std::filesystem;

namespace trireme::io {

namespace {

// `s` without a leading `prefix` in either width of colon ("作者:" / "作者：").
std::string after_label(const std::string& s, const std::string& label) {
  for (const std::string colon : {":", "："}) {
    if (s.rfind(label + colon, 0) == 0) return s.substr(label.size() + colon.size());
  }
  return s;
}

std::string strip_brackets(std::string s) {
  if (s.rfind("《", 0) == 0) s = s.substr(std::string("《").size());
  const size_t close = s.rfind("》");
  if (close != std::string::npos) s = s.substr(0, close);
  return s;
}

}  // namespace

Poem parse_poem(const Document& doc) {
  Poem p;
  const std::string& t = doc.text;
  const size_t first = t.find('\n'), second = first == std::string::npos ? first : t.find('\n', first + 1);
  TRIREME_CHECK(second != std::string::npos, "poem tasks: a poem of '", doc.source,
                "' has no title, author and verse lines: \"", t.substr(0, 60), "\"");
  p.title = strip_brackets(after_label(t.substr(0, first), "题目"));
  p.poet = after_label(t.substr(first + 1, second - first - 1), "作者");
  if (const size_t dates = p.poet.find("（"); dates != std::string::npos) p.poet = p.poet.substr(0, dates);
  p.body = t.substr(second + 1);
  p.dynasty = fs::path(doc.source).filename().string().rfind("song", 0) == 0 ? "宋" : "唐";
  return p;
}

PoemTasks write_poem_tasks(const std::string& out_dir, double val_fraction, uint64_t seed, int top_poets,
                           const std::string& fortunes_dir) {
  TRIREME_CHECK(top_poets >= 2, "poem tasks: --top-poets must be at least 2, got ", top_poets);
  const Corpus corpus = load_poem_corpus(fortunes_dir);
  std::vector<Poem> poems;
  for (const Document& d : corpus.documents) poems.push_back(parse_poem(d));
  const std::vector<size_t> val = choose_validation_documents(poems.size(), val_fraction, seed);
  std::map<std::string, int> count;
  for (const Poem& p : poems) ++count[p.poet];
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [poet, n] : count) by_count.emplace_back(-n, poet);
  std::sort(by_count.begin(), by_count.end());  // most frequent first, ties by name
  PoemTasks out;
  for (int i = 0; i < top_poets && i < int(by_count.size()); ++i) out.poets.push_back(by_count[size_t(i)].second);

  std::map<std::string, std::string> text;  // file name -> JSONL
  for (size_t i = 0; i < poems.size(); ++i) {
    const Poem& p = poems[i];
    const std::string split = std::binary_search(val.begin(), val.end(), i) ? "val" : "train";
    text["dynasty." + split + ".jsonl"] += nlohmann::json{{"text", p.body}, {"label", p.dynasty}}.dump() + "\n";
    if (std::find(out.poets.begin(), out.poets.end(), p.poet) != out.poets.end())
      text["poet." + split + ".jsonl"] += nlohmann::json{{"text", p.body}, {"label", p.poet}}.dump() + "\n";
    text["sft." + split + ".jsonl"] +=
        nlohmann::json{{"prompt", "《" + p.title + "》\n作者：" + p.poet + "\n"}, {"response", p.body}}.dump() + "\n";
  }
  fs::create_directories(out_dir);
  for (const auto& [name, body] : text) {
    write_file_atomic(fs::path(out_dir) / name, body);
    out.files.push_back((fs::path(out_dir) / name).string());
  }
  out.poems = int64_t(poems.size());
  out.val_poems = int64_t(val.size());
  return out;
}

}  // namespace trireme::io
