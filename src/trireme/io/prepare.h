// From a [data] config to token shards on disk and back: what `trireme prepare` runs, and
// what training loads.
//
//   TrainConfig tc = Config::load("train.toml").resolve();
//   PreparedDataset written = prepare_from_config(tc.data, tc.train.out_dir + "/data");
//   PreparedData data = load_prepared_dataset(tc.train.out_dir + "/data");
//   DataLoader train(std::move(data.train.tokens), tc.model.block_size, tc.train.seed);
#pragma once

#include <memory>
#include <string>

#include "trireme/io/config.h"
#include "trireme/io/token_shard.h"
#include "trireme/io/tokenizer.h"

namespace trireme::io {

// Loads the corpus, trains the tokenizer on the whole corpus text (so a character vocabulary
// covers the validation text too), splits it (split_point) and writes train.bin, val.bin and
// tokenizer.json into out_dir. Deterministic: the same config gives the same bytes.
PreparedDataset prepare_from_config(const DataConfig& data, const std::string& out_dir);

struct PreparedData {
  std::unique_ptr<Tokenizer> tokenizer;
  TokenShard train, val;
};

// Reads what prepare wrote; refuses shards whose vocabulary size differs from the tokenizer's.
PreparedData load_prepared_dataset(const std::string& dir);

}  // namespace trireme::io
