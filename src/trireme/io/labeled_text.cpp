// Sequence-classification examples (see labeled_text.h).
#include "trireme/io/labeled_text.h"

#include <nlohmann/json.hpp>

#include "trireme/core/error.h"
#include "trireme/io/config.h"
#include "trireme/io/example_lines.h"

namespace trireme::io {

std::vector<std::string> parse_csv_row(const std::string& row, const std::string& where) {
  std::vector<std::string> fields(1);
  size_t i = 0;
  while (i <= row.size()) {
    std::string& f = fields.back();
    if (i < row.size() && row[i] == '"' && f.empty()) {
      ++i;
      for (;;) {
        if (i >= row.size()) throw ConfigError(str_cat(where, ": a quoted field is not closed"));
        if (row[i] == '"') {
          if (i + 1 < row.size() && row[i + 1] == '"') {
            f += '"', i += 2;
            continue;
          }
          ++i;
          break;
        }
        f += row[i++];
      }
      if (i < row.size() && row[i] != ',')
        throw ConfigError(str_cat(where, ": text after a closing quote (write a quote inside a field as \"\")"));
    }
    if (i == row.size()) break;
    if (row[i] == ',') {
      fields.emplace_back();
    } else {
      f += row[i];
    }
    ++i;
  }
  return fields;
}

namespace {

LabeledText parse_line(const std::string& line, bool csv, const std::string& where) {
  LabeledText ex;
  if (csv) {
    const auto fields = parse_csv_row(line, where);
    if (fields.size() != 2)
      throw ConfigError(str_cat(where, ": expected 2 fields (text,label), got ", fields.size(),
                                " (quote a text that holds commas)"));
    ex.text = fields[0], ex.label = fields[1];
  } else {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw ConfigError(str_cat(where, ": not a JSON object (expected {\"text\": ..., \"label\": ...})"));
    if (!j.contains("text") || !j["text"].is_string())
      throw ConfigError(str_cat(where, ": \"text\" must be a string"));
    if (!j.contains("label") || !(j["label"].is_string() || j["label"].is_number_integer()))
      throw ConfigError(str_cat(where, ": \"label\" must be a string or an integer"));
    ex.text = j["text"].get<std::string>();
    ex.label = j["label"].is_string() ? j["label"].get<std::string>() : std::to_string(j["label"].get<int64_t>());
  }
  if (ex.text.empty()) throw ConfigError(str_cat(where, ": the text is empty"));
  if (ex.label.empty()) throw ConfigError(str_cat(where, ": the label is empty"));
  return ex;
}

}  // namespace

LabeledFile read_labeled_file(const std::string& path, bool skip_bad_lines) {
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  LabeledFile out;
  bool first = true;
  out.skipped = read_example_lines(path, skip_bad_lines, [&](const std::string& line, const std::string& where, int64_t n) {
    const bool header = first && csv && line == "text,label";
    first = false;
    if (header) return;
    LabeledText ex = parse_line(line, csv, where);
    ex.line = n;
    out.examples.push_back(std::move(ex));
  });
  if (out.examples.empty()) throw ConfigError(str_cat("finetune: '", path, "' has no examples"));
  return out;
}

}  // namespace trireme::io
