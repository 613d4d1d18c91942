// Hugging Face model folders in and out (see hf_checkpoint.h).
#include "trireme/train/hf_checkpoint.h"

#include <unistd.h>

#include <cstdio>

#include "trireme/io/file_write.h"
#include "trireme/io/safetensors.h"
#include "trireme/io/tokenizer_hf.h"
#include "trireme/models/gpt_hf.h"
#include "trireme/models/lora.h"
#include "trireme/ops/copy.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/lora_adapters.h"
#include "trireme/train/sft_chat_template.h"
#include "trireme/train/step_runner.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const fs::path& where, const std::string& what) {
  throw io::ConfigError(str_cat("'", where.string(), "': ", what));
}

json read_json(const fs::path& path) {
  try {
    return json::parse(io::read_file(path));
  } catch (const json::exception& e) {
    refuse(path, str_cat("not valid JSON (", e.what(), ")"));
  }
}

// The tensors of one safetensors file, float32; other dtypes refused naming the tensor.
void read_tensors(const fs::path& file, std::map<std::string, Tensor>& into) {
  io::SafetensorsFile f;
  try {
    f = io::load_safetensors(file.string());
  } catch (const Error& e) {
    refuse(file, e.what());
  }
  for (auto& [name, t] : f.tensors) {
    if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16)
      refuse(file, str_cat("tensor '", name, "' is ", io::safetensors_dtype_name(t.dtype()),
                           "; only F32, F16 and BF16 weights are read"));
    if (!into.emplace(name, to_dtype(t, DType::f32)).second) refuse(file, str_cat("tensor '", name, "' appears in two files"));
  }
}

std::string format_float(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

HfModel read_hf_model(const fs::path& dir) {
  if (!fs::is_directory(dir)) refuse(dir, "not a folder (expected a Hugging Face model folder with config.json)");
  if (!fs::exists(dir / "config.json")) refuse(dir, "no config.json: not a Hugging Face model folder");
  HfModel m;
  const json config = read_json(dir / "config.json");
  try {
    m.config = models::gpt_config_from_hf(config);
  } catch (const Error& e) {
    refuse(dir / "config.json", e.what());
  }
  m.architecture = config["architectures"][0].get<std::string>();
  std::map<std::string, Tensor> hf;
  if (fs::exists(dir / "model.safetensors")) {
    read_tensors(dir / "model.safetensors", hf);
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    const fs::path index_file = dir / "model.safetensors.index.json";
    const json index = read_json(index_file);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      refuse(index_file, "no \"weight_map\" object");
    std::map<std::string, std::vector<std::string>> shards;  // file -> names it should hold
    for (const auto& [name, file] : index["weight_map"].items()) {
      const std::string f = file.is_string() ? file.get<std::string>() : "";
      if (f.empty() || f.find('/') != std::string::npos || f == "..") refuse(index_file, str_cat("tensor '", name, "' maps to ", file.dump()));
      shards[f].push_back(name);
    }
    for (const auto& [file, names] : shards) {
      if (!fs::exists(dir / file)) refuse(index_file, str_cat("lists the shard '", file, "', which is missing"));
      read_tensors(dir / file, hf);
      for (const std::string& n : names)
        if (!hf.contains(n)) refuse(dir / file, str_cat("has no tensor '", n, "', which the index places there"));
    }
  } else {
    refuse(dir, "no model.safetensors or model.safetensors.index.json (PyTorch .bin files are not read; "
                "save the model with safe_serialization=True)");
  }
  try {
    m.weights = models::gpt_weights_from_hf(hf, m.config);
  } catch (const Error& e) {
    refuse(dir, e.what());
  }
  if (fs::exists(dir / "tokenizer.json")) {
    m.tokenizer = read_json(dir / "tokenizer.json");
    io::HfTokenizer::from_json(m.tokenizer, (dir / "tokenizer.json").string());  // refuses what it cannot reproduce
  }
  return m;
}

io::Config config_for_gpt(const models::GPTConfig& c) {
  const bool llama = c.arch == models::GPTArch::llama;
  std::vector<std::string> set = {
      str_cat("model.arch=", llama ? "llama" : "gpt2"),
      str_cat("model.d_model=", c.d_model),
      str_cat("model.n_layer=", c.n_layer),
      str_cat("model.n_head=", c.n_head),
      str_cat("model.block_size=", c.block_size),
      str_cat("model.vocab_size=", c.vocab_size),
      str_cat("model.intermediate_size=", c.ffn),
      str_cat("model.norm_eps=", format_float(c.ln_eps)),
      str_cat("model.bias=", c.bias ? "true" : "false"),
      str_cat("model.tie_embeddings=", c.tie_embeddings ? "true" : "false"),
      "model.dropout=0.0",
  };
  if (llama) {
    set.push_back(str_cat("model.n_kv_head=", c.kv_heads()));
    set.push_back(str_cat("model.rope_theta=", format_float(c.rope_theta)));
    set.push_back(str_cat("model.qkv_bias=", c.qkv_bias ? "true" : "false"));
  }
  if (!llama && c.gelu != GeluApprox::tanh)
    throw io::ConfigError("config.json: activation_function \"gelu\" (exact GELU) has no trireme config key yet; "
                          "trireme's GPT-2 uses the tanh approximation (gelu_new)");
  io::Config cfg;
  for (const std::string& s : set) cfg.set(s);
  return cfg;
}

fs::path import_hf(const fs::path& dir, const fs::path& out) {
  if (fs::exists(out) && !fs::is_empty(out))
    refuse(out, "exists and is not empty; give a new folder (nothing was written)");
  HfModel m = read_hf_model(dir);
  if (m.tokenizer.is_null())
    refuse(dir, "no tokenizer.json: trireme checkpoints carry their tokenizer (byte-level BPE tokenizer.json)");
  const io::Config cfg = config_for_gpt(m.config);
  Checkpoint ck;
  ck.step = 0;
  for (auto& [name, t] : m.weights) ck.model.emplace_back(name, t);
  ck.state = {{"config", cfg.to_toml()},
              {"tokenizer", m.tokenizer},
              {"imported_from", {{"format", "huggingface"}, {"architecture", m.architecture}, {"dir", fs::absolute(dir).string()}}}};
  // Kept for SFT (finetune.chat_template = "tokenizer" finds it here) and written back on export.
  if (const auto chat = hf_folder_chat_template(dir)) ck.state["chat_template"] = chat->to_json();
  fs::create_directories(out / "checkpoints");
  return save_checkpoint(out / "checkpoints", ck, /*keep=*/1);
}

bool export_hf(const std::string& checkpoint, const fs::path& out, const ExportOptions& options) {
  if (fs::exists(out)) refuse(out, "exists; give a new folder (nothing was written)");
  auto dir = find_latest_checkpoint(checkpoint);
  if (!dir) refuse(checkpoint, "no checkpoint found (give a checkpoint folder or a training run's out_dir)");
  Checkpoint ck = load_checkpoint_model(*dir);
  if (!ck.state.contains("config") || !ck.state["config"].is_string() || !ck.state.contains("tokenizer"))
    refuse(*dir, "state.json has no config or tokenizer");
  const io::TrainConfig tc = io::Config::parse(ck.state["config"].get<std::string>(), (*dir / "state.json").string()).resolve();
  const std::unique_ptr<io::Tokenizer> tok = io::tokenizer_from_json(ck.state["tokenizer"]);
  const models::GPTConfig c = gpt_config(tc, tok->vocab_size());
  std::map<std::string, Tensor> ours;
  for (auto& [name, t] : ck.model) ours[name] = to_dtype(t, DType::f32);
  const bool has_adapters = !models::lora_tensors(ck.model).empty();
  if (!options.adapters.empty()) {
    if (!options.merge) refuse(options.adapters, "--adapters are folded into the weights: give --merge too");
    if (has_adapters) refuse(*dir, "has LoRA adapters of its own; give it without --adapters (its own are merged)");
    const AdapterFile a = load_adapters(options.adapters);
    for (const auto& [name, t] : a.tensors) ours[name] = to_dtype(t, DType::f32);
    try {
      ours = models::merge_lora(ours, a.scale, str_cat("adapters '", options.adapters, "'"));
    } catch (const Error& e) {
      refuse(*dir, e.what());
    }
  } else if (has_adapters) {
    if (!options.merge)
      refuse(*dir, "has LoRA adapters, which a Hugging Face model folder has no place for; give --merge to fold them "
                   "into the weights");
    ours = models::merge_lora(ours, tc.lora.alpha / double(std::max<int64_t>(tc.lora.rank, 1)), dir->string());
  }
  std::vector<std::pair<std::string, Tensor>> hf;
  try {
    hf = models::gpt_weights_to_hf(ours, c);
  } catch (const Error& e) {
    refuse(*dir, e.what());
  }
  // Written beside `out` and renamed into place once complete.
  const fs::path parent = fs::absolute(out).parent_path();
  fs::create_directories(parent);
  const fs::path tmp = parent / str_cat(".", out.filename().string(), ".tmp-", ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    json config = models::gpt_config_to_hf(c);
    // transformers' GPT-2 defaults to 50256 for these, which a smaller vocabulary does not have.
    std::optional<int32_t> eos;
    if (auto* hf_tok = dynamic_cast<const io::HfTokenizer*>(tok.get())) eos = hf_tok->token_id("<|endoftext|>");
    config["bos_token_id"] = config["eos_token_id"] = eos ? json(*eos) : json();
    io::write_file(tmp / "config.json", config.dump(2) + "\n");
    io::write_file(tmp / "model.safetensors", io::serialize_safetensors(hf, {{"format", "pt"}}));
    if (tok->type() == "hf") io::write_file(tmp / "tokenizer.json", tok->to_json().dump(1) + "\n");
    // The chat template the checkpoint carries (imported, or an SFT run's), where transformers'
    // apply_chat_template reads it.
    if (tok->type() == "hf" && ck.state.contains("chat_template")) {
      const SftChatTemplate chat = SftChatTemplate::from_json(ck.state["chat_template"], (*dir / "state.json").string());
      json tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"chat_template", chat.text}};
      if (!chat.tokens.bos.empty()) tokenizer_config["bos_token"] = chat.tokens.bos;
      if (!chat.tokens.eos.empty()) tokenizer_config["eos_token"] = chat.tokens.eos;
      io::write_file(tmp / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
    }
    io::fsync_path(tmp, /*directory=*/true);
    fs::rename(tmp, out);
    io::fsync_path(parent, /*directory=*/true);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return tok->type() == "hf";
}

}  // namespace trireme::train
