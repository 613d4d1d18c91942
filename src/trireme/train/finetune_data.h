// The data of a fine-tuning run (finetune.task "sft" or "classify", docs/FINETUNING.md): the
// tokenizer it must use (the base model's: the ids must mean what they meant in pretraining) and
// the examples of finetune.train_file split into training and validation.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/io/sft.h"
#include "trireme/io/tokenizer.h"
#include "trireme/train/sft_chat_template.h"

namespace trireme::train {

// The tokenizer of `model` (a checkpoint folder, a run's out_dir, or a Hugging Face folder),
// read without its weights; io::ConfigError naming `who` and the path when there is none.
std::unique_ptr<io::Tokenizer> tokenizer_of(const std::string& model, const std::string& who);

// The indices of `n` examples held out for validation: round(fraction n) of them (at least one
// when n >= 2), drawn with `seed`; sorted.
std::vector<size_t> held_out_examples(size_t n, double fraction, uint64_t seed);

struct SftData {
  io::PackedSequences train, val;
  std::string description;  // one log line: examples, sequences, skipped lines, truncations
};
// finetune.train_file (and val_file, or the held-out share of train_file) packed with
// `tokenizer`, rendered through `chat` when given (io/sft_chat.h) and finetune.template otherwise.
SftData prepare_sft_data(const io::TrainConfig& cfg, const io::Tokenizer& tokenizer,
                         const SftChatTemplate* chat = nullptr);

}  // namespace trireme::train
