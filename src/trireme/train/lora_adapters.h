// adapters.safetensors: a LoRA run's adapters alone, whole single-process tensors named as in the
// model ("transformer.h.0.attn.c_proj.lora.A"), with the rank, alpha and targets in the file's
// metadata. Every checkpoint of a LoRA run has one beside model.safetensors; `trireme export hf
// BASE --merge --adapters FILE` folds one into a base model (docs/FINETUNING.md).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "trireme/io/config.h"
#include "trireme/nn/module.h"

namespace trireme::train {

// Written atomically (a temporary file renamed into place).
void save_adapters(const std::filesystem::path& path, const nn::NamedTensors& adapters, const io::LoraConfig& lora);

struct AdapterFile {
  std::map<std::string, Tensor> tensors;
  double scale = 1;  // alpha / rank
};
// Reads and checks a file save_adapters wrote (io::ConfigError naming the file when it is not one).
AdapterFile load_adapters(const std::filesystem::path& path);

}  // namespace trireme::train
