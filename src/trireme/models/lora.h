// LoRA on the GPT (GPT::add_lora; the adapters themselves: parallel/lora.h): the layers a block
// offers as targets, and folding adapters into the base weights for export and inference.
//
// An adapted layer "<layer>" holds "<layer>.weight" (frozen) and its adapter "<layer>.lora.A"
// (r, in) and "<layer>.lora.B" (out, r), whole tensors in checkpoints. Merging replaces the
// weight by W + scale · B A and drops the adapter: the merged model computes what the adapted
// one computes without dropout.
//
//   auto merged = models::merge_lora(state, /*scale=*/alpha / rank, "checkpoint 'out'");
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora_names.h"

namespace trireme::models {

// The layers of a block that may get adapters, as named under the block.
std::vector<std::string> lora_target_layers(GPTArch arch);
// `state` with every adapter folded into its layer's weight and removed. Every adapter must come
// with its base weight, with B (out, r) and A (r, in) for a weight (out, in): an adapter made for
// another model is an error naming the tensor, its shape and `source`.
std::map<std::string, Tensor> merge_lora(const std::map<std::string, Tensor>& state, double scale,
                                         const std::string& source);

}  // namespace trireme::models
