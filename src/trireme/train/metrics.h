// Training metrics: one JSON object per line (step, loss, val_loss when measured, lr,
// grad_norm, tokens_per_s, elapsed_s, peak_memory_bytes; loss_scale and skipped_steps for f16
// training; val_accuracy, val_macro_f1 and majority_accuracy beside a classifier's val_loss), each line written whole by one checked write as it comes: a full disk stops the
// run with an error naming the file instead of a silently cut file.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trireme::io {
class AppendFile;
}

namespace trireme::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  std::optional<double> val_loss;
  // finetune.task = "classify", at evaluations: validation accuracy and macro-F1, and the
  // accuracy of always predicting the training set's most frequent label.
  std::optional<double> val_accuracy, val_macro_f1, majority_accuracy;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double elapsed_s = 0;
  int64_t peak_memory_bytes = 0;
  std::optional<double> loss_scale;      // train.precision = "f16" only
  std::optional<int64_t> skipped_steps;  // f16: steps skipped for inf/NaN gradients so far
  std::optional<int64_t> graph_traces;   // train.mode = "static": graphs traced so far (1 + retraces)
  nlohmann::json to_json() const;
};

class MetricsWriter {
 public:
  // Appends when resuming (the old lines up to the resumed step stay), else truncates.
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<io::AppendFile> out_;
};

// Reads a metrics file; lines that are not JSON objects are an error naming the line number.
std::vector<nlohmann::json> read_metrics(const std::string& path);

}  // namespace trireme::train
