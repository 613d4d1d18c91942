// `trireme prepare`: tokenize a corpus into train/validation token shards and a tokenizer.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/io/prepare.h"

namespace trireme::cli {

Command add_prepare_command(CLI::App& root) {
  struct Options {
    std::vector<std::string> corpus{"tang"};
    std::string tokenizer = "char", out = "out/data";
    int64_t vocab = 2000;
    double val_fraction = 0.1;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("prepare", "Tokenize text into token shards (train.bin, val.bin, tokenizer.json)");
  app->add_option("--corpus", opt->corpus, "\"tang\" (the Tang and Song poems of fortunes-zh), or UTF-8 files/folders");
  app->add_option("--tokenizer", opt->tokenizer, "char or bpe")->check(CLI::IsMember({"char", "bpe"}));
  app->add_option("--vocab", opt->vocab, "BPE vocabulary size")->check(CLI::Range(257, 1 << 20));
  app->add_option("--val-fraction", opt->val_fraction, "share of the text for validation")->check(CLI::Range(0.0, 0.5));
  app->add_option("-o,--out", opt->out, "output folder");
  return {app, [opt] {
            io::DataConfig data{.corpus = opt->corpus, .tokenizer = opt->tokenizer, .bpe_vocab_size = opt->vocab,
                                .val_fraction = opt->val_fraction};
            io::PreparedDataset d = io::prepare_from_config(data, opt->out);
            std::printf("%lld train + %lld validation tokens (%s tokenizer)\nwrote %s, %s, %s\n",
                        (long long)d.train_tokens, (long long)d.val_tokens, opt->tokenizer.c_str(), d.train_path.c_str(),
                        d.val_path.c_str(), d.tokenizer_path.c_str());
            return kExitOk;
          }};
}

}  // namespace trireme::cli
