// Hugging Face model folders in and out of trireme (docs/HUGGINGFACE.md):
//
//   import: DIR/config.json, DIR/model.safetensors or the shards DIR/model.safetensors.index.json
//           lists, DIR/tokenizer.json  ->  OUT/checkpoints/step_00000000, a trireme checkpoint
//           (model.safetensors in float32, state.json with the config and the tokenizer) that
//           `trireme generate --checkpoint OUT` loads
//   export: a trireme checkpoint  ->  DIR/config.json, DIR/model.safetensors (float32, "format":
//           "pt"), DIR/tokenizer.json when the checkpoint's tokenizer is a Hugging Face one
//
// Names and layouts are mapped by models/gpt_hf.h. Safetensors dtypes F32, F16 and BF16 are
// read (as float32); any other, an unknown architecture, key or shape is an io::ConfigError
// naming it. Nothing is half-written: the import is a checkpoint saved atomically
// (train/checkpoint.h), the export a folder written beside DIR and renamed into place; an
// existing OUT or DIR is refused.
//
//   HfModel m = read_hf_model("Qwen2-0.5B");        // config, trireme-named weights, tokenizer
//   import_hf("Qwen2-0.5B", "runs/qwen2");
//   export_hf("runs/qwen2", "qwen2-again");
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "trireme/io/config.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

struct HfModel {
  models::GPTConfig config;
  std::map<std::string, Tensor> weights;  // trireme names and layouts, float32 on the CPU
  nlohmann::json tokenizer;               // tokenizer.json, or null when the folder has none
  std::string architecture;               // "Qwen2ForCausalLM", ...
};

HfModel read_hf_model(const std::filesystem::path& dir);

// The training config (its [model] keys) that describes `c`, as TOML; the other keys at defaults.
io::Config config_for_gpt(const models::GPTConfig& c);

// Returns the checkpoint folder written.
std::filesystem::path import_hf(const std::filesystem::path& dir, const std::filesystem::path& out);
// LoRA (docs/FINETUNING.md): Hugging Face's model folder has no place for adapters, so a
// checkpoint with adapters is refused unless `merge` folds them into the weights; `adapters`
// (an adapters.safetensors, with merge) folds that file's adapters into a checkpoint without any.
struct ExportOptions {
  bool merge = false;
  std::string adapters;
};
// `checkpoint`: a checkpoint folder or a run's out_dir (its latest). Returns whether a
// tokenizer.json was written (only a Hugging Face tokenizer has one).
bool export_hf(const std::string& checkpoint, const std::filesystem::path& out, const ExportOptions& options = {});

}  // namespace trireme::train
