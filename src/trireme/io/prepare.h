// From a [data] config to token shards on disk and back: what `trireme prepare` runs, and
// what training loads.
//
//   TrainConfig tc = Config::load("train.toml").resolve();
//   PreparedDataset written = prepare_from_config(tc.data, "out/data");   // written.split says how
//   PreparedData data = load_prepared_dataset("out/data");
//   DataLoader train(std::move(data.train.tokens), tc.model.block_size, tc.train.seed);
#pragma once

#include <memory>
#include <string>

#include "trireme/io/config.h"
#include "trireme/io/token_shard.h"
#include "trireme/io/tokenizer.h"

namespace trireme::io {

// Loads the corpus, trains the tokenizer on the whole corpus text (or loads data.tokenizer_file) (so a character vocabulary
// covers the validation text too), splits it into whole documents (split_corpus in corpus.h,
// with data.val_fraction and data.split_seed) and writes train.bin, val.bin and tokenizer.json
// into out_dir (prepare_dataset_split: all or nothing). Deterministic: the same config gives the
// same bytes.
PreparedDataset prepare_from_config(const DataConfig& data, const std::string& out_dir);

struct PreparedData {
  std::unique_ptr<Tokenizer> tokenizer;
  TokenShard train, val;
};

// Reads what prepare wrote. Refuses, naming the folder or file and what to do: a missing folder,
// a missing file (a folder without tokenizer.json is a preparation that did not finish), and
// shards whose vocabulary size differs from the tokenizer's.
PreparedData load_prepared_dataset(const std::string& dir);

}  // namespace trireme::io
