// JSON-lines metrics writer and reader.
#include "trireme/train/metrics.h"

#include <fstream>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"

namespace trireme::train {

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step},           {"loss", loss},           {"lr", lr},
                      {"grad_norm", grad_norm}, {"tokens_per_s", tokens_per_s}, {"elapsed_s", elapsed_s},
                      {"peak_memory_bytes", peak_memory_bytes}};
  if (val_loss) j["val_loss"] = *val_loss;
  if (val_accuracy) j["val_accuracy"] = *val_accuracy;
  if (val_macro_f1) j["val_macro_f1"] = *val_macro_f1;
  if (majority_accuracy) j["majority_accuracy"] = *majority_accuracy;
  if (loss_scale) j["loss_scale"] = *loss_scale;
  if (skipped_steps) j["skipped_steps"] = *skipped_steps;
  if (graph_traces) j["graph_traces"] = *graph_traces;
  return j;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path),
      out_(std::make_unique<io::AppendFile>(path, append ? io::AppendFile::Mode::kAppend : io::AppendFile::Mode::kTruncate)) {}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write(const StepMetrics& m) { out_->write_line(m.to_json().dump()); }

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  TRIREME_CHECK(in.good(), "cannot open metrics file '", path, "'");
  std::vector<nlohmann::json> rows;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      TRIREME_FAIL(path, ":", n, ": not a JSON object (is this a trireme metrics.jsonl file?)");
    }
    TRIREME_CHECK(j.is_object() && j.contains("step"), path, ":", n, ": a metrics line needs at least \"step\"");
    rows.push_back(std::move(j));
  }
  return rows;
}

}  // namespace trireme::train
