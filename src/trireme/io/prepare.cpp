// Dataset preparation from a config, and loading the prepared files (see prepare.h).
#include "trireme/io/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "trireme/io/corpus.h"

namespace trireme::io {

PreparedDataset prepare_from_config(const DataConfig& data, const std::string& out_dir) {
  Corpus corpus = load_corpus(data.corpus);
  std::string text = corpus.text();
  std::unique_ptr<Tokenizer> tokenizer = train_tokenizer(data.tokenizer, text, data.bpe_vocab_size);
  // With many documents, validation takes every k-th document (k = 1 / val_fraction), so both
  // splits sample the whole corpus (the poem corpus is Tang poems then Song poems: a tail split
  // would validate a Tang-trained model on Song poems only). One document: the tail of its text.
  const size_t k = data.val_fraction > 0 ? size_t(std::max(1.0, std::round(1.0 / data.val_fraction))) : 0;
  if (k == 0 || corpus.documents.size() < 2 * k) return prepare_dataset(text, *tokenizer, out_dir, data.val_fraction);
  Corpus train, val;
  for (size_t i = 0; i < corpus.documents.size(); ++i) {
    (i % k == k - 1 ? val : train).documents.push_back(corpus.documents[i]);
  }
  return prepare_dataset_split(train.text(), val.text(), *tokenizer, out_dir);
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
