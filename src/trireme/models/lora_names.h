// The names of LoRA adapter tensors (models/lora.h): what checkpoints and optimizers need to tell
// adapters from base weights, apart from the model code (the checkpoint reader uses only this).
#pragma once

#include <string>

#include "trireme/nn/module.h"

namespace trireme::models {

// True for an adapter tensor's name ("....lora.A" / "....lora.B").
bool is_lora_name(const std::string& name);
// The adapter tensors of a (whole) state dict, in its order.
nn::NamedTensors lora_tensors(const nn::NamedTensors& state);

}  // namespace trireme::models
