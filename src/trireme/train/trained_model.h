// A trained model read back from a checkpoint for inference (generate, eval): the config, the
// tokenizer and the model weights, and nothing else. Only state.json and model.safetensors are
// read, so a checkpoint copied without its optimizer state (the bulk of it) still works.
//
//   TrainedModel m = load_trained_model("out", Device::cpu(), "generate");
//   Tensor logits = m.model->forward(ids);
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "trireme/io/config.h"
#include "trireme/io/tokenizer.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

struct TrainedModel {
  std::filesystem::path dir;  // the checkpoint folder read
  int64_t step = 0;
  io::TrainConfig config;     // validated (io::Config::resolve) before the model was built
  std::unique_ptr<io::Tokenizer> tokenizer;
  std::unique_ptr<models::GPT> model;  // in eval mode, on the device asked for
};

// `checkpoint`: a checkpoint folder, or a run's out_dir / checkpoints folder (its latest is
// used), or a Hugging Face model folder (config.json, safetensors, tokenizer.json; read in place
// as `trireme import hf` reads it). `who` prefixes the errors ("generate"). The device must be usable (errors say why not).
// memory_check: refuse (io::ConfigError) a model whose memory estimate exceeds what the device
// has free (memory_check.h), before building it.
TrainedModel load_trained_model(const std::string& checkpoint, Device device, const std::string& who,
                                bool memory_check = true);

}  // namespace trireme::train
