// Dataset preparation from a config, and loading the prepared files (see prepare.h).
#include "trireme/io/prepare.h"

#include <filesystem>

#include "trireme/io/corpus.h"

namespace trireme::io {

PreparedDataset prepare_from_config(const DataConfig& data, const std::string& out_dir) {
  Corpus corpus = load_corpus(data.corpus);
  std::string text = corpus.text();
  std::unique_ptr<Tokenizer> tokenizer = train_tokenizer(data.tokenizer, text, data.bpe_vocab_size);
  return prepare_dataset(text, *tokenizer, out_dir, data.val_fraction);
}

PreparedData load_prepared_dataset(const std::string& dir) {
  namespace fs = std::filesystem;
  PreparedData d;
  d.tokenizer = load_tokenizer((fs::path(dir) / "tokenizer.json").string());
  for (auto [name, shard] : {std::pair{"train.bin", &d.train}, std::pair{"val.bin", &d.val}}) {
    std::string path = (fs::path(dir) / name).string();
    *shard = read_token_shard(path);
    TRIREME_CHECK(shard->vocab_size == d.tokenizer->vocab_size(), path, ": vocabulary size ", shard->vocab_size,
                  " does not match the tokenizer's ", d.tokenizer->vocab_size(),
                  " (the shards were prepared with a different tokenizer; run prepare again)");
  }
  return d;
}

}  // namespace trireme::io
