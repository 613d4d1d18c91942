// Dataset preparation from a config, and loading the prepared files (see prepare.h).
#include "trireme/io/prepare.h"

#include <filesystem>

#include "trireme/io/corpus.h"

namespace trireme::io {

namespace fs = std::filesystem;

PreparedDataset prepare_from_config(const DataConfig& data, const std::string& out_dir) {
  PreparedDataset d;
  std::string split_description;
  {
    // The corpus and the joined text are dropped before the shards are encoded.
    Corpus corpus = load_corpus(data.corpus);
    std::unique_ptr<Tokenizer> tokenizer;
    if (data.tokenizer_file.empty()) {
      tokenizer = train_tokenizer(data.tokenizer, corpus.text(), data.bpe_vocab_size);
    } else {
      try {
        tokenizer = load_tokenizer(data.tokenizer_file);
      } catch (const Error& e) {
        throw ConfigError(str_cat("data.tokenizer_file = \"", data.tokenizer_file, "\": ", e.what()));
      }
    }
    CorpusSplit split = split_corpus(corpus, data.val_fraction, uint64_t(data.split_seed));
    corpus = {};
    d = prepare_dataset_split(split.train_text, split.val_text, *tokenizer, out_dir);
    split_description = std::move(split.description);
  }
  d.split = std::move(split_description);
  return d;
}

PreparedData load_prepared_dataset(const std::string& dir) {
  std::error_code ec;
  TRIREME_CHECK(fs::is_directory(dir, ec), "'", dir, "' ", fs::exists(dir, ec) ? "is not a folder" : "does not exist",
                "; write it with `trireme prepare -o ", dir, "` first");
  std::string missing;
  for (const char* name : {"train.bin", "val.bin", "tokenizer.json"}) {
    if (!fs::exists(fs::path(dir) / name, ec)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  TRIREME_CHECK(missing.empty(), "'", dir, "' has no ", missing,
                " (a prepared folder holds train.bin, val.bin and tokenizer.json; prepare writes tokenizer.json "
                "last, so without it a preparation did not finish); run `trireme prepare -o ", dir, "` again");
  PreparedData d;
  d.tokenizer = load_tokenizer((fs::path(dir) / "tokenizer.json").string());
  for (auto [name, shard] : {std::pair{"train.bin", &d.train}, std::pair{"val.bin", &d.val}}) {
    std::string path = (fs::path(dir) / name).string();
    *shard = read_token_shard(path);
    TRIREME_CHECK(shard->vocab_size == d.tokenizer->vocab_size(), path, ": vocabulary size ", shard->vocab_size,
                  " does not match the tokenizer's ", d.tokenizer->vocab_size(), " in ",
                  (fs::path(dir) / "tokenizer.json").string(),
                  " (the shards were prepared with a different tokenizer); run `trireme prepare -o ", dir, "` again");
  }
  return d;
}

}  // namespace trireme::io
