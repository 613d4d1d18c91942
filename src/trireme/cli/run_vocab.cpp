// The vocabulary a run of a config would have (commands.h).
#include <exception>
#include <filesystem>

#include "trireme/cli/commands.h"
#include "trireme/io/corpus.h"
#include "trireme/io/tokenizer.h"

namespace trireme::cli {

std::optional<int64_t> run_vocab(const io::TrainConfig& tc) {
  namespace fs = std::filesystem;
  const fs::path dir = tc.data.dir.empty() ? fs::path(tc.train.out_dir) / "data" : fs::path(tc.data.dir);
  if (fs::exists(dir / "tokenizer.json")) return io::load_tokenizer((dir / "tokenizer.json").string())->vocab_size();
  if (!tc.data.dir.empty() || tc.finetune.task != "lm") return std::nullopt;
  // Not prepared yet: the tokenizer the run would load, or the character tokenizer it would train
  // on the corpus (cheap: a pass over the text). A BPE vocabulary would need its training.
  try {
    if (!tc.data.tokenizer_file.empty()) return io::load_tokenizer(tc.data.tokenizer_file)->vocab_size();
    if (tc.data.tokenizer == "char") {
      return io::train_tokenizer("char", io::load_corpus(tc.data.corpus).text(), 0)->vocab_size();
    }
  } catch (const std::exception&) {
    // A corpus or tokenizer that cannot be read here: the run will say so; the estimate assumes.
  }
  return std::nullopt;
}

}  // namespace trireme::cli
