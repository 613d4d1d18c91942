// The chat template of a supervised fine-tuning run (finetune.chat_template, io/sft_chat.h):
// where its text and its bos_token / eos_token come from, and how a checkpoint keeps them so a
// resumed run (or one started from it) renders its examples the same way.
//
//   finetune.chat_template = "tokenizer"   the model's: chat_template.jinja or the "chat_template"
//                                          of tokenizer_config.json in the Hugging Face folder
//                                          --init-from names; for a trireme checkpoint (and on
//                                          --resume), the one it saved, else tokenizer_config.json
//                                          beside data.tokenizer_file
//   finetune.chat_template = "file:PATH"   a Jinja file (or a tokenizer_config.json: its chat_template)
//   finetune.chat_template = "{% ... %}"   the template's text
// bos_token and eos_token come from that tokenizer_config.json when there is one, else eos_token
// is the tokenizer's end-of-text token (io::sft_end_tokens) and bos_token is "".
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trireme/io/config.h"
#include "trireme/io/sft_chat.h"
#include "trireme/io/tokenizer.h"

namespace trireme::train {

struct SftChatTemplate {
  std::string text;       // the Jinja source
  io::ChatTokens tokens;  // bos_token, eos_token
  std::string origin;     // where it came from, for errors and the log

  nlohmann::json to_json() const;
  static SftChatTemplate from_json(const nlohmann::json& j, const std::string& origin);
};

// The chat template a Hugging Face folder carries (chat_template.jinja, else the "chat_template"
// of tokenizer_config.json), with the bos_token / eos_token of its tokenizer_config.json; nullopt
// when it has none. `trireme import hf` keeps it in the checkpoint and `export hf` writes it back.
std::optional<SftChatTemplate> hf_folder_chat_template(const std::filesystem::path& dir);

// The run's chat template; nullopt when finetune.chat_template is "" (finetune.template is
// used). `model` is the folder the run starts from (--init-from, or the run's own on --resume).
// io::ConfigError naming the file and what to do when it cannot be found or read.
std::optional<SftChatTemplate> load_sft_chat_template(const io::TrainConfig& cfg, const std::string& model,
                                                      const io::Tokenizer& tokenizer);

}  // namespace trireme::train
