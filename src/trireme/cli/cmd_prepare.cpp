// `trireme prepare`: tokenize a corpus into train/validation token shards and a tokenizer, and say
// how to train on them (data.dir).
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "trireme/cli/commands.h"
#include "trireme/io/poem_tasks.h"
#include "trireme/io/prepare.h"

namespace trireme::cli {

namespace {

// `s` as one shell word: as it is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& s) {
  bool safe = !s.empty();
  for (char c : s) {
    safe = safe && (std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_-./=:+,@%").find(c) != std::string_view::npos);
  }
  if (safe) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Command add_prepare_command(CLI::App& root) {
  struct Options {
    io::DataConfig data = io::Config().resolve().data;  // the same defaults as `trireme train`
    std::string out = "out/data";
    bool poem_tasks = false;
    int top_poets = 5;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand(
      "prepare", "Tokenize text into token shards (train.bin, val.bin, tokenizer.json) for `trireme train --set data.dir=FOLDER`");
  app->add_option("--corpus", opt->data.corpus, "\"tang\" (the Tang and Song poems of fortunes-zh), or UTF-8 files/folders")
      ->capture_default_str();
  CLI::Option* kind =
      app->add_option("--tokenizer", opt->data.tokenizer, "char or bpe")->check(CLI::IsMember({"char", "bpe"}))->capture_default_str();
  app->add_option("--tokenizer-file", opt->data.tokenizer_file,
                  "tokenize with this tokenizer.json as it is (Hugging Face byte-level BPE, or one trireme wrote) "
                  "instead of training --tokenizer")
      ->check(CLI::ExistingFile)
      ->excludes(kind);
  app->add_option("--vocab", opt->data.bpe_vocab_size, "BPE vocabulary size")
      ->check(CLI::Range(257, 1 << 20))
      ->capture_default_str()
      ->excludes("--tokenizer-file");
  app->add_option("--val-fraction", opt->data.val_fraction,
                  "share of the documents held out for validation, spread over the corpus (at least one; a "
                  "one-document corpus is split inside, near its end)")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  app->add_option("--split-seed", opt->data.split_seed, "seed that picks the validation documents")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("-o,--out", opt->out, "output folder")->capture_default_str();
  app->add_flag("--poem-tasks", opt->poem_tasks,
                "instead of token shards, write the Chinese fine-tuning tasks from the poems: poem -> dynasty and "
                "poem -> poet (classification) and title + poet -> poem (sft) JSONL, the validation poems those "
                "of --val-fraction and --split-seed (docs/FINETUNING.md)");
  app->add_option("--top-poets", opt->top_poets, "with --poem-tasks: the poet task's classes, the most frequent poets")
      ->check(CLI::Range(2, 100))
      ->capture_default_str();
  return {app, [opt] {
            if (opt->poem_tasks) {
              const io::PoemTasks t = io::write_poem_tasks(opt->out, opt->data.val_fraction, uint64_t(opt->data.split_seed),
                                                           opt->top_poets);
              std::string poets;
              for (const auto& p : t.poets) poets += (poets.empty() ? "" : ", ") + p;
              std::printf("%lld poems, %lld held out for validation; poets: %s\n", (long long)t.poems,
                          (long long)t.val_poems, poets.c_str());
              for (const auto& f : t.files) std::printf("wrote %s\n", f.c_str());
              return kExitOk;
            }
            io::PreparedDataset d;
            try {
              d = io::prepare_from_config(opt->data, opt->out);
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme prepare: error: %s\n", e.what());
              return kExitUsage;
            }
            const std::string tok = opt->data.tokenizer_file.empty() ? opt->data.tokenizer : opt->data.tokenizer_file;
            std::printf("%s\n%lld train + %lld validation tokens (%s tokenizer)\nwrote %s, %s, %s\n",
                        d.split.c_str(), (long long)d.train_tokens, (long long)d.val_tokens, tok.c_str(),
                        d.train_path.c_str(), d.val_path.c_str(), d.tokenizer_path.c_str());
            std::printf("train on it with:\n  trireme train %s\n(or dir = \"%s\" under [data] in the --config file, "
                        "with no other [data] keys)\n",
                        ("--set " + shell_word("data.dir=" + opt->out)).c_str(), opt->out.c_str());
            return kExitOk;
          }};
}

}  // namespace trireme::cli
