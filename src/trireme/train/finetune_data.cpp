// The data of a fine-tuning run (see finetune_data.h).
#include "trireme/train/finetune_data.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "trireme/io/data_loader.h"
#include "trireme/io/file_write.h"
#include "trireme/train/checkpoint.h"

namespace fs = std::filesystem;

namespace trireme::train {

std::unique_ptr<io::Tokenizer> tokenizer_of(const std::string& model, const std::string& who) {
  try {
    if (fs::exists(fs::path(model) / "tokenizer.json") && !fs::exists(fs::path(model) / "state.json"))
      return io::tokenizer_from_json(nlohmann::json::parse(io::read_file(fs::path(model) / "tokenizer.json")));
    auto dir = find_latest_checkpoint(model);
    if (!dir) throw io::ConfigError(str_cat(who, ": no checkpoint or Hugging Face model at '", model, "'"));
    const auto state = nlohmann::json::parse(io::read_file(*dir / "state.json"));
    if (!state.contains("tokenizer"))
      throw io::ConfigError(str_cat(who, ": '", (*dir / "state.json").string(), "' has no tokenizer"));
    return io::tokenizer_from_json(state["tokenizer"]);
  } catch (const io::ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw io::ConfigError(str_cat(who, ": cannot read the tokenizer of '", model, "': ", e.what()));
  }
}

std::vector<size_t> held_out_examples(size_t n, double fraction, uint64_t seed) {
  if (n < 2 || fraction <= 0) return {};
  const size_t k = std::clamp<size_t>(size_t(std::llround(fraction * double(n))), 1, n - 1);
  std::vector<size_t> out;
  for (size_t i = 0; i < k; ++i) out.push_back(size_t(io::permute_index(i, n, seed, 0x5f7)));
  std::sort(out.begin(), out.end());
  return out;
}

SftData prepare_sft_data(const io::TrainConfig& cfg, const io::Tokenizer& tokenizer, const SftChatTemplate* chat) {
  const io::FinetuneConfig& f = cfg.finetune;
  const bool skip = f.bad_lines == "skip";
  std::optional<io::ChatTemplate> templ;
  if (chat) templ.emplace(chat->text, chat->origin);
  // Each file's examples are rendered where the file is known, for errors that name its lines.
  auto read = [&](const std::string& path) {
    io::SftFile file = io::read_sft_file(path, skip);
    if (templ) io::apply_chat_template(file.examples, *templ, chat->tokens, path);
    return file;
  };
  io::SftFile train = read(f.train_file);
  std::vector<io::SftExample> train_ex, val_ex;
  int64_t skipped = train.skipped;
  if (!f.val_file.empty()) {
    io::SftFile val = read(f.val_file);
    skipped += val.skipped;
    train_ex = std::move(train.examples), val_ex = std::move(val.examples);
  } else {
    const auto held = held_out_examples(train.examples.size(), f.val_fraction, uint64_t(cfg.data.split_seed));
    if (held.empty())
      throw io::ConfigError(str_cat("finetune.train_file: '", f.train_file, "' has ", train.examples.size(),
                                    " example(s), too few to hold some out for validation; give finetune.val_file"));
    size_t next = 0;
    for (size_t i = 0; i < train.examples.size(); ++i) {
      const bool is_val = next < held.size() && held[next] == i;
      next += is_val;
      (is_val ? val_ex : train_ex).push_back(std::move(train.examples[i]));
    }
  }
  SftData d;
  const std::string text_template = chat ? io::kChatTemplateText : f.template_text;
  d.train = io::pack_sft(train_ex, tokenizer, text_template, cfg.model.block_size, f.pack);
  d.val = io::pack_sft(val_ex, tokenizer, text_template, cfg.model.block_size, f.pack);
  // A prompt longer than a sequence leaves nothing of its response; when that is every example,
  // the loss is 0 at every step and the run would train nothing without saying so.
  for (const auto& [packed, key] : {std::pair{&d.train, "finetune.train_file"}, std::pair{&d.val, "finetune.val_file"}}) {
    if (packed->examples > 0 && packed->response_tokens == 0)
      throw io::ConfigError(str_cat(key, ": no response token is left to ", packed == &d.train ? "train on" : "validate on",
                                    ": ", packed->truncated, " of ", packed->examples,
                                    " example(s) are longer than a sequence (model.block_size + 1 = ", cfg.model.block_size + 1,
                                    " tokens) and were cut before their response; raise model.block_size or shorten the prompts"));
  }
  d.description = str_cat("sft: ", chat ? str_cat("chat template from ", chat->origin, "; ") : "", d.train.examples,
                          " training examples in ", d.train.sequences, " sequences (",
                          d.train.response_tokens, " response tokens), ", d.val.examples, " validation examples in ",
                          d.val.sequences, f.pack ? " packed" : "", " sequences of ", cfg.model.block_size + 1,
                          " tokens", skipped ? str_cat("; ", skipped, " malformed line(s) skipped") : "",
                          d.train.truncated + d.val.truncated
                              ? str_cat("; ", d.train.truncated + d.val.truncated, " example(s) longer than a sequence cut")
                              : "");
  return d;
}

}  // namespace trireme::train
