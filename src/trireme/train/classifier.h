// Sequence classification (finetune.task = "classify", docs/FINETUNING.md): a linear head on the
// final norm's output at each text's last token, trained with the cross-entropy over the labels
// from a pretrained model (--init-from), either the whole model or, with [lora], the adapters and
// the head alone. The model is models::GPT with a classifier head (Note [classifier head]) and
// each text a packed sequence whose one counted target is its label, so the trainer's loop and
// the StepRunner's step train it as they train the language model, in every layout (dp with
// ZeRO, tp with sequence parallelism, pp, recomputation, autocast), checkpoints and --resume
// included. What is classification's own is here: the data and the evaluation (validation
// accuracy, macro-F1 and loss, beside the majority-class baseline, in metrics.jsonl).
// Checkpoints also hold the head ("classifier.weight", "classifier.bias") and the label set.
//
//   ClassifierData d = prepare_classifier_data(cfg, tokenizer, /*labels=*/{});
//   ClassifierEvaluation e = evaluate_classifier(runner, val_loader, d, cfg.train.batch_size);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/tokenizer.h"
#include "trireme/train/step_runner.h"

namespace trireme::train {

struct ClassifierData {
  std::vector<std::string> labels;  // the label set: class i is labels[i]
  // The texts as packed sequences (Note [packed sequences], io/data_loader.h): block_size + 1
  // tokens each, the class index the one counted target, at the text's last token.
  std::vector<int32_t> train_tokens, val_tokens;
  std::vector<uint8_t> train_mask, val_mask;
  std::vector<int> val_labels;      // per validation text, in file order
  double majority_accuracy = 0;     // of always predicting the training set's most frequent label
  std::string description;          // one log line: texts, labels, skipped lines, the baseline
};

// finetune.train_file (and val_file, or the held-out share of train_file) encoded with
// `tokenizer`, texts cut to their first model.block_size tokens. `labels`: a resumed run's own
// label set; empty, finetune.labels or (when that is empty too) the training file's labels,
// sorted. A label of the validation file (or, with a given label set, of the training file)
// outside the set is an io::ConfigError naming the file and the line.
ClassifierData prepare_classifier_data(const io::TrainConfig& cfg, const io::Tokenizer& tokenizer,
                                       std::vector<std::string> labels);

struct ClassifierEvaluation {
  double loss = 0, accuracy = 0, macro_f1 = 0;
};

// The classifier's mean cross-entropy, accuracy and macro-F1 over every validation text (`val`:
// data.val_* in a DataLoader), without dropout. Collective: every rank calls it, every rank gets
// the same answer.
ClassifierEvaluation evaluate_classifier(StepRunner& runner, const io::DataLoader& val, const ClassifierData& data,
                                         int64_t batch_size);

}  // namespace trireme::train
