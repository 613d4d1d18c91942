// Sequence classification (finetune.task = "classify", docs/FINETUNING.md): a linear head on the
// final norm's output at each text's last token, trained with the cross-entropy over the labels
// from a pretrained model (--init-from), either the whole model or, with [lora], the adapters and
// the head alone. The model is models::GPT with a classifier head (Note [classifier head]) and
// each text a packed sequence whose one counted target is its label, so the step, the gradient
// reductions, the optimizer and the checkpoints are the StepRunner's of every layout (dp with
// ZeRO, tp with sequence parallelism, pp, recomputation, autocast); what is classification's own
// is the data, the evaluation and the loop around the runner. Validation accuracy, macro-F1 and
// loss go into metrics.jsonl at every evaluation, beside the majority-class baseline; checkpoints
// hold the model, the head ("classifier.weight", "classifier.bias"), the optimizer and the label
// set, and --resume continues bit for bit in the same layout (batches and dropout are keyed by
// the step and the global sample). Every rank of a parallel job calls it; rank 0 logs, writes
// metrics.jsonl and holds out_dir.
//
//   train::ClassifierSummary s = train::run_classifier(cfg, {.init_from = "out/tang"});
#pragma once

#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/train/trainer.h"

namespace trireme::train {

struct ClassifierSummary {
  int64_t steps = 0;
  std::vector<double> losses;  // per step of this invocation
  double val_accuracy = 0, val_macro_f1 = 0, val_loss = 0;
  double majority_accuracy = 0;  // predicting the training set's most frequent label
  std::vector<std::string> labels;
  std::string metrics_path, checkpoint_path;
};

// Texts are cut to their first model.block_size tokens. A label of the validation file (or, with
// finetune.labels, of the training file) outside the label set is an io::ConfigError naming the
// file and the line.
ClassifierSummary run_classifier(const io::Config& config, const TrainOptions& options);

}  // namespace trireme::train
