// Where an SFT run's chat template comes from (see sft_chat_template.h).
#include "trireme/train/sft_chat_template.h"

#include <filesystem>

#include "trireme/io/file_write.h"
#include "trireme/io/sft.h"
#include "trireme/io/tokenizer_hf.h"
#include "trireme/train/checkpoint.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {

const char* kKey = "finetune.chat_template";

std::string read_text(const fs::path& p) {
  try {
    return io::read_file(p);
  } catch (const std::exception& e) {
    throw io::ConfigError(str_cat(kKey, ": cannot read '", p.string(), "': ", e.what()));
  }
}

nlohmann::json read_json(const fs::path& p) {
  try {
    return nlohmann::json::parse(read_text(p));
  } catch (const io::ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw io::ConfigError(str_cat(kKey, ": cannot read '", p.string(), "': ", e.what()));
  }
}

// A special token as tokenizer_config.json writes it: a string, {"content": ...}, or null.
std::string token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return "";
}

// The "chat_template" of a tokenizer_config.json: a string, or a list of named templates of
// which the one named "default" is used (as transformers does).
std::string template_of(const nlohmann::json& config, const fs::path& path) {
  const auto missing = [&](const std::string& why) {
    return io::ConfigError(str_cat(kKey, " = \"tokenizer\": '", path.string(), "' ", why,
                                   "; give the template as finetune.chat_template = \"file:PATH\" or as its text"));
  };
  if (!config.is_object() || !config.contains("chat_template")) throw missing("has no \"chat_template\"");
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
  throw missing("has a \"chat_template\" that is neither a string nor a list with one named \"default\"");
}

bool is_hf_folder(const fs::path& model) {
  return fs::exists(model / "tokenizer.json") && !fs::exists(model / "state.json");
}

// The folder whose tokenizer_config.json belongs to the run's tokenizer, if any.
std::optional<fs::path> tokenizer_folder(const io::TrainConfig& cfg, const fs::path& model) {
  if (is_hf_folder(model)) return model;
  if (!cfg.data.tokenizer_file.empty()) return fs::path(cfg.data.tokenizer_file).parent_path();
  return std::nullopt;
}

// The template a trireme checkpoint saved (an SFT run with a chat template), if any.
std::optional<SftChatTemplate> saved_template(const fs::path& model) {
  if (is_hf_folder(model)) return std::nullopt;
  const auto dir = find_latest_checkpoint(model);
  if (!dir || !fs::exists(*dir / "state.json")) return std::nullopt;
  const nlohmann::json state = read_json(*dir / "state.json");
  if (!state.contains("chat_template")) return std::nullopt;
  return SftChatTemplate::from_json(state["chat_template"], str_cat("the chat template saved in '", dir->string(), "'"));
}

io::ChatTokens default_tokens(const io::Tokenizer& tokenizer) {
  io::ChatTokens t;
  if (const auto* hf = dynamic_cast<const io::HfTokenizer*>(&tokenizer)) {
    const auto end = io::sft_end_tokens(tokenizer);
    if (end.size() == 1 && hf->is_special(end[0])) t.eos = hf->token_to_string(end[0]);
  }
  return t;
}

}  // namespace

nlohmann::json SftChatTemplate::to_json() const {
  return {{"template", text}, {"bos_token", tokens.bos}, {"eos_token", tokens.eos}, {"origin", origin}};
}

SftChatTemplate SftChatTemplate::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("template") || !j["template"].is_string())
    throw io::ConfigError(str_cat(kKey, ": ", origin, " is malformed (no \"template\" string)"));
  return {j["template"].get<std::string>(), {token_text(j, "bos_token"), token_text(j, "eos_token")}, origin};
}

std::optional<SftChatTemplate> hf_folder_chat_template(const fs::path& dir) {
  const fs::path jinja = dir / "chat_template.jinja", config_path = dir / "tokenizer_config.json";
  const bool has_config = fs::exists(config_path);
  const nlohmann::json config = has_config ? read_json(config_path) : nlohmann::json::object();
  SftChatTemplate t;
  t.tokens = {token_text(config, "bos_token"), token_text(config, "eos_token")};
  // transformers saves the template as chat_template.jinja in newer versions, inside
  // tokenizer_config.json in older ones; the .jinja file wins, as there.
  if (fs::exists(jinja)) {
    t.text = read_text(jinja);
    t.origin = jinja.string();
    return t;
  }
  if (config.is_object() && config.contains("chat_template")) {
    t.text = template_of(config, config_path);
    t.origin = config_path.string();
    return t;
  }
  return std::nullopt;
}

std::optional<SftChatTemplate> load_sft_chat_template(const io::TrainConfig& cfg, const std::string& model_dir,
                                                      const io::Tokenizer& tokenizer) {
  const std::string& source = cfg.finetune.chat_template;
  if (source.empty()) return std::nullopt;
  const fs::path model(model_dir);
  // A trireme checkpoint's own template first: a resumed run renders as it did.
  if (source == "tokenizer")
    if (auto saved = saved_template(model)) return saved;
  const std::optional<fs::path> folder = tokenizer_folder(cfg, model);
  const std::optional<fs::path> config_path =
      folder && fs::exists(*folder / "tokenizer_config.json") ? std::optional(*folder / "tokenizer_config.json")
                                                               : std::nullopt;
  SftChatTemplate out;
  if (config_path) {
    const nlohmann::json config = read_json(*config_path);
    out.tokens = {token_text(config, "bos_token"), token_text(config, "eos_token")};
  } else {
    out.tokens = default_tokens(tokenizer);
  }
  if (source == "tokenizer") {
    if (const auto found = folder ? hf_folder_chat_template(*folder) : std::nullopt) {
      out.text = found->text;
      out.origin = found->origin;
    } else if (config_path) {
      template_of(read_json(*config_path), *config_path);  // throws: it names what the file lacks
    } else {
      const std::string where = folder ? str_cat("'", (*folder / "tokenizer_config.json").string(), "'")
                                       : str_cat("the Hugging Face folder --init-from names (the model is '", model_dir,
                                                 "', a trireme checkpoint without a saved chat template)");
      throw io::ConfigError(str_cat(kKey, " = \"tokenizer\": no tokenizer_config.json with the chat template: looked for ",
                                    where, "; copy the model's tokenizer_config.json there, or give the template as "
                                    "finetune.chat_template = \"file:PATH\" or as its text"));
    }
  } else if (source.starts_with("file:")) {
    const fs::path path = source.substr(5);
    if (!fs::exists(path))
      throw io::ConfigError(str_cat(kKey, " = \"", source, "\": no file '", path.string(),
                                    "'; give the path of a Jinja template or of a tokenizer_config.json"));
    if (path.extension() == ".json") {
      const nlohmann::json config = read_json(path);
      out.text = template_of(config, path);
      out.tokens = {token_text(config, "bos_token"), token_text(config, "eos_token")};
    } else {
      out.text = read_text(path);
    }
    out.origin = path.string();
  } else {
    out.text = source;
    out.origin = kKey;
  }
  return out;
}

}  // namespace trireme::train
