// Sequence-classification examples (docs/FINETUNING.md): a JSONL file of {"text": ..., "label": ...}
// (the label a string or an integer), or a CSV file (name ending .csv) of text,label rows with an
// optional "text,label" header; fields may be double-quoted ("" for a quote inside), one row per
// line. Blank lines are skipped; a malformed line is refused naming the file and the line, or
// with skip_bad_lines skipped and counted.
//
//   io::LabeledFile f = io::read_labeled_file("dynasty.train.jsonl", false);
//   for (auto& ex : f.examples) ex.text, ex.label, ex.line;
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trireme::io {

struct LabeledText {
  std::string text, label;
  int64_t line = 0;
};

struct LabeledFile {
  std::vector<LabeledText> examples;
  int64_t skipped = 0;
};

LabeledFile read_labeled_file(const std::string& path, bool skip_bad_lines);

// One CSV row's fields (RFC 4180 quoting, no line breaks inside fields); throws io::ConfigError
// prefixed with `where` on an unterminated quote or text after a closing quote.
std::vector<std::string> parse_csv_row(const std::string& row, const std::string& where);

}  // namespace trireme::io
