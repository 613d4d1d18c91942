// The vocabulary of the prepared data a run of a config would use (commands.h).
#include <filesystem>

#include "trireme/cli/commands.h"
#include "trireme/io/tokenizer.h"

namespace trireme::cli {

std::optional<int64_t> prepared_vocab(const io::TrainConfig& tc) {
  namespace fs = std::filesystem;
  const fs::path dir = tc.data.dir.empty() ? fs::path(tc.train.out_dir) / "data" : fs::path(tc.data.dir);
  if (!fs::exists(dir / "tokenizer.json")) return std::nullopt;
  return io::load_tokenizer((dir / "tokenizer.json").string())->vocab_size();
}

}  // namespace trireme::cli
