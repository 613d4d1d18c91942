// Sequence classification's data and evaluation (see classifier.h).
#include "trireme/train/classifier.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "trireme/io/labeled_text.h"
#include "trireme/train/classification_metrics.h"
#include "trireme/train/finetune_data.h"

namespace trireme::train {

namespace {

// Appends each text as a packed sequence: its ids (cut to block_size) padded with 0, and the class
// index as the target of its last token, every other target masked (Note [classifier head],
// models/gpt.h). Causal attention: what follows the last token changes nothing before it.
std::vector<int> encode(const std::vector<io::LabeledText>& examples, const io::Tokenizer& tok,
                        const std::vector<std::string>& labels, int64_t block_size, const std::string& file,
                        std::vector<int32_t>& tokens, std::vector<uint8_t>& mask) {
  std::vector<int> classes;
  const size_t L = size_t(block_size) + 1;
  for (const auto& ex : examples) {
    auto it = std::find(labels.begin(), labels.end(), ex.label);
    if (it == labels.end()) {
      std::string set;
      for (const auto& l : labels) set += (set.empty() ? "\"" : ", \"") + l + "\"";
      throw io::ConfigError(str_cat(file, " line ", ex.line, ": label \"", ex.label, "\" is not in the label set (",
                                    set, "); fix the line or add the label to finetune.labels"));
    }
    std::vector<int32_t> ids = tok.encode(ex.text);
    if (int64_t(ids.size()) > block_size) ids.resize(size_t(block_size));
    const size_t last = std::max<size_t>(ids.size(), 1) - 1, at = tokens.size();
    tokens.resize(at + L, 0);
    mask.resize(at + L, 0);
    std::copy(ids.begin(), ids.end(), tokens.begin() + int64_t(at));
    const int label = int(it - labels.begin());
    tokens[at + last + 1] = label, mask[at + last + 1] = 1;
    classes.push_back(label);
  }
  return classes;
}

}  // namespace

ClassifierData prepare_classifier_data(const io::TrainConfig& cfg, const io::Tokenizer& tokenizer,
                                       std::vector<std::string> labels) {
  const io::FinetuneConfig& f = cfg.finetune;
  const bool skip = f.bad_lines == "skip";
  io::LabeledFile train_file = io::read_labeled_file(f.train_file, skip);
  std::vector<io::LabeledText> train_ex, val_ex;
  std::string val_name = f.val_file;
  if (!f.val_file.empty()) {
    train_ex = std::move(train_file.examples);
    val_ex = io::read_labeled_file(f.val_file, skip).examples;
  } else {
    val_name = f.train_file;
    const auto held = held_out_examples(train_file.examples.size(), f.val_fraction, uint64_t(cfg.data.split_seed));
    if (held.empty())
      throw io::ConfigError(str_cat("finetune.train_file: '", f.train_file, "' has ", train_file.examples.size(),
                                    " example(s), too few to hold some out for validation; give finetune.val_file"));
    for (size_t i = 0; i < train_file.examples.size(); ++i)
      (std::binary_search(held.begin(), held.end(), i) ? val_ex : train_ex).push_back(train_file.examples[i]);
  }
  if (labels.empty()) labels = f.labels;
  if (labels.empty()) {
    std::set<std::string> seen;
    for (const auto& ex : train_ex) seen.insert(ex.label);
    labels.assign(seen.begin(), seen.end());
  }
  if (labels.size() < 2) throw io::ConfigError("finetune.labels: a classifier needs at least two labels");
  // A class index is a token of its packed sequence too (an input after the text's last token).
  if (int64_t(labels.size()) > tokenizer.vocab_size())
    throw io::ConfigError(str_cat("finetune.labels: ", labels.size(), " labels, more than the tokenizer's ",
                                  tokenizer.vocab_size(), " tokens; a classifier takes at most as many labels ",
                                  "as tokens"));
  ClassifierData d;
  d.labels = labels;
  const int64_t T = cfg.model.block_size;
  const std::vector<int> train_labels =
      encode(train_ex, tokenizer, labels, T, f.train_file, d.train_tokens, d.train_mask);
  d.val_labels = encode(val_ex, tokenizer, labels, T, val_name, d.val_tokens, d.val_mask);
  std::vector<int> counts(labels.size(), 0);
  for (int l : train_labels) ++counts[size_t(l)];
  const int majority = int(std::max_element(counts.begin(), counts.end()) - counts.begin());
  for (int l : d.val_labels) d.majority_accuracy += l == majority;
  d.majority_accuracy /= double(d.val_labels.size());
  d.description = str_cat("classify: ", train_labels.size(), " training and ", d.val_labels.size(),
                          " validation texts, ", labels.size(), " labels",
                          train_file.skipped ? str_cat("; ", train_file.skipped, " malformed line(s) skipped") : "",
                          "; majority-class baseline (\"", labels[size_t(majority)], "\") ", d.majority_accuracy);
  return d;
}

ClassifierEvaluation evaluate_classifier(StepRunner& runner, const io::DataLoader& val, const ClassifierData& data,
                                         int64_t batch_size) {
  // Whole batches cover the validation texts; the samples past them (the next epoch's) are left out.
  const int64_t n = int64_t(data.val_labels.size()), batches = (n + batch_size - 1) / batch_size;
  const Tensor logits = runner.eval_class_logits(val, batches);
  const float* all = logits.data<float>();
  const size_t C = data.labels.size();
  std::vector<int> truth, predicted;
  double loss = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int label = data.val_labels[size_t(val.sample_start(k) / (val.block_size() + 1))];
    const float* row = all + size_t(k) * C;
    const float* top = std::max_element(row, row + C);
    double sum_exp = 0;
    for (size_t c = 0; c < C; ++c) sum_exp += std::exp(double(row[c]) - double(*top));
    loss += double(*top) + std::log(sum_exp) - double(row[label]);
    truth.push_back(label);
    predicted.push_back(int(top - row));
  }
  const ClassificationMetrics m = classification_metrics(truth, predicted, int(C));
  return {.loss = loss / double(n), .accuracy = m.accuracy, .macro_f1 = m.macro_f1};
}

}  // namespace trireme::train
